"""QK-clip (Kimi K2): the per-head max logit against a brute-force loop over heads and
positions, the rescale by hand, and its defining property: after the clip, the same inputs give
each clipped head a max logit of exactly tau."""

from __future__ import annotations

import math

import pytest
import torch
from model_helpers import gpt_config, vit_config

from models.gpt import GPT
from models.qk_clip import head_max_logits
from models.vit import ViT


def clip_gpt(tau: float = 100.0, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(gpt_config(qk_clip=tau, qk_norm=False, **kw))


def test_head_max_logits_by_brute_force():
    model = clip_gpt(n_embd=16, n_head=4)
    attn = model.blocks[0].attn
    x = 3 * torch.randn(2, 6, 16)
    hs = 4
    q = x @ attn.q_proj.weight.T + attn.q_proj.bias
    k = x @ attn.k_proj.weight.T + attn.k_proj.bias
    expected = []
    for h in range(4):
        qh, kh = q[..., h * hs : (h + 1) * hs], k[..., h * hs : (h + 1) * hs]
        best = max(float((qh[b, i] @ kh[b, j]).detach()) / math.sqrt(hs)
                   for b in range(2) for i in range(6) for j in range(i + 1))  # fmt: skip
        expected.append(best)
    torch.testing.assert_close(
        head_max_logits(attn, x), torch.tensor(expected), rtol=1e-5, atol=1e-5
    )


def test_a_clip_scales_each_hot_heads_q_and_k_so_its_max_logit_is_tau():
    model = clip_gpt(tau=1.0, n_embd=16, n_head=4)
    attn = model.blocks[0].attn
    x = 3 * torch.randn(2, 6, 16)
    before = head_max_logits(attn, x)
    w_q, w_k = attn.q_proj.weight.clone(), attn.k_proj.weight.clone()
    model.train()
    attn(x)  # a training forward records the logits (the attention's own input)
    assert model.qk_clip.clip() == int((before > 1.0).sum()) > 0
    after = head_max_logits(attn, x)
    torch.testing.assert_close(after, before.clamp(max=1.0), rtol=1e-5, atol=1e-6)
    eta = (1.0 / before).clamp(max=1.0).sqrt().repeat_interleave(4)[:, None]
    torch.testing.assert_close(attn.q_proj.weight, w_q * eta)
    torch.testing.assert_close(attn.k_proj.weight, w_k * eta)
    assert model.qk_clip.clip() == 0  # nothing recorded since: nothing to do


def test_a_head_whose_every_logit_is_negative_is_left_alone():
    """tau / S is negative when S < 0: only heads over tau are rescaled (the pilot of F16 read
    NaN weights from the square root of it at tau 100, every run of the Muon + QK-clip arm)."""
    model = clip_gpt(tau=100.0, n_embd=16, n_head=4)
    attn = model.blocks[0].attn
    with torch.no_grad():  # q = b, k = -b at every position: every logit is -|b|^2 / sqrt(4)
        for proj, sign in ((attn.q_proj, 1.0), (attn.k_proj, -1.0)):
            proj.weight.zero_()
            proj.bias.copy_(sign * torch.ones(16))
    w_q, w_k = attn.q_proj.weight.clone(), attn.k_proj.bias.clone()
    model.train()
    attn(torch.randn(2, 6, 16))
    assert (model.qk_clip.last[0] < 0).all()
    assert model.qk_clip.clip() == 0
    torch.testing.assert_close(attn.q_proj.weight, w_q)
    torch.testing.assert_close(attn.k_proj.bias, w_k)


def test_only_training_forwards_record():
    model = clip_gpt(tau=1e-6)
    idx = torch.randint(0, model.cfg.vocab_size, (2, 8))
    model.eval()
    model(idx)
    with torch.no_grad():
        model.train()
        model(idx)
    assert model.qk_clip.last == {}
    model(idx)
    assert sorted(model.qk_clip.last) == list(range(model.cfg.n_layer))


def test_trains_in_gpt_and_vit_with_the_step_hook():
    for model, batch in (
        (clip_gpt(tau=0.5), None),
        (ViT(vit_config(qk_clip=0.5)), (torch.randn(3, 1, 4, 4), torch.randint(0, 10, (3,)))),
    ):
        if batch is None:
            idx = torch.randint(0, model.cfg.vocab_size, (2, 8))
            batch = (idx, idx)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            _, loss = model(*batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.after_step()
        assert torch.isfinite(loss) and model.qk_clip.clipped_heads > 0


@pytest.mark.parametrize(
    "kw,line",
    [
        ({"qk_norm": True}, "set model.qk_norm=false"),
        ({"placement": "hybrid"}, "a placement without its own q, k norm"),
        ({"weight_norm": True}, "model.sigma_reparam reparametrize them"),
        ({"qk_clip_tau": -1.0}, "must be > 0"),
    ],
)
def test_refusals_are_one_line(kw, line):
    tau = kw.pop("qk_clip_tau", 100.0)
    with pytest.raises(ValueError, match=line):
        gpt_config(qk_clip=tau, **{"qk_norm": False, **kw})


def test_every_micro_batch_of_a_step_is_read():
    """Gradient accumulation: two training forwards before one step; S_h is the larger of the
    two, head by head (not the last forward's: 0 heads clipped on a small last micro-batch)."""
    model = clip_gpt(tau=1.0, n_embd=16, n_head=4)
    attn = model.blocks[0].attn
    big, small = 3 * torch.randn(2, 6, 16), 0.01 * torch.randn(2, 6, 16)
    expected = torch.maximum(head_max_logits(attn, big), head_max_logits(attn, small))
    model.train()
    attn(big)
    attn(small)
    torch.testing.assert_close(model.qk_clip.last[0], expected)
    assert model.qk_clip.clip() == int((expected > 1.0).sum()) > 0
