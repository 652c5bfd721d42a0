"""nGPT (Loshchilov et al. 2024) against its equations written out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from model_helpers import (
    attention,
    batch,
    block_cfg,
    build,
    gelu,
    gpt_config,
    heads,
    linear,
    randomize_small_params,
    unit,
)
from torch import nn

from models.catalog import NORMS
from models.gpt import GPT
from models.ngpt import NormalizedBlock

NORM_TYPES = {type(spec(16)) for spec in NORMS.values()} - {nn.Identity}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_normalized_block_equation(causal, bias):
    """h <- Norm(h + |a_A| (Norm(Attn(h)) - h)); h <- Norm(h + |a_M| (Norm(MLP(h)) - h)), with
    q, k = s_qk * Norm(q), s_qk * Norm(k) per head, logits q.k * sqrt(d_head), and the MLP's
    hidden units times s_u * sqrt(d); each s read as p * init / scale."""
    torch.manual_seed(0)
    b = NormalizedBlock(block_cfg(bias=bias))
    b.attn.causal = causal  # BlockConfig is the encoder's; the GPT's blocks are causal
    randomize_small_params(b)  # the stored p of every scale, and the biases
    d, hs, x = 8, 4, torch.randn(2, 5, 8) * 3
    a = b.attn
    s_qk = (a.q_norm.s_qk.weight * math.sqrt(d)).view(2, 1, hs)  # init 1 / scale 1/sqrt(d)
    alpha_a = (b.attn_alpha.weight * 0.05 * math.sqrt(d)).abs()
    alpha_m = (b.mlp_alpha.weight * 0.05 * math.sqrt(d)).abs()
    s_u = b.mlp.hidden_scale.s_u.weight * 1.0  # init 1 / scale 1

    h = unit(x)
    q, k = (s_qk * unit(heads(linear(h, p), 2)) for p in (a.q_proj, a.k_proj))
    v = heads(linear(h, a.v_proj), 2)
    attn = linear(attention(q, k, v, math.sqrt(hs), causal), a.out_proj)
    h = unit(h + alpha_a * (unit(attn) - h))
    mlp = linear(gelu(linear(h, b.mlp.fc1) * s_u * math.sqrt(d)), b.mlp.fc2)
    expected = unit(h + alpha_m * (unit(mlp) - h))
    torch.testing.assert_close(b(x), expected, atol=1e-5, rtol=1e-5)
    assert a.q_norm is a.k_norm  # one s_qk for queries and keys, as in the paper


def test_scales_start_at_their_paper_values():
    torch.manual_seed(0)
    model = GPT(gpt_config(placement="ngpt"))
    b = model.blocks[0]
    torch.testing.assert_close(b.attn_alpha(), torch.full((16,), 0.05))
    torch.testing.assert_close(b.attn.q_norm.s_qk(), torch.ones(16))
    torch.testing.assert_close(b.mlp.hidden_scale.s_u(), torch.ones(64))
    torch.testing.assert_close(model.logit_scale.s_z(), torch.ones(23))
    # The stored parameters start at their scale: 1/sqrt(d) for alpha, s_qk and s_z.
    assert b.attn_alpha.weight[0].item() == pytest.approx(0.25)  # 1 / sqrt(16)
    assert model.logit_scale.s_z.weight[0].item() == pytest.approx(0.25)


def sphere_errors(model) -> list[float]:
    """|norm - 1| of every vector that nGPT keeps on the unit sphere."""
    pairs = model.embedding_weights() + [p for b in model.blocks for p in b.sphere_weights()]
    return [(w.norm(dim=dim) - 1).abs().max().item() for w, dim in pairs]


@pytest.mark.parametrize("model_name", ["gpt", "vit"])
def test_weights_start_on_the_sphere_and_return_after_a_step(model_name):
    torch.manual_seed(0)
    model = build(model_name, placement="ngpt", bias=False)
    assert max(sphere_errors(model)) < 1e-5
    assert not any(type(m) in NORM_TYPES for m in model.modules())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    model(*batch(model_name))[1].backward()
    optimizer.step()
    assert max(sphere_errors(model)) > 1e-2  # the step moved them off
    model.normalize_weights()
    assert max(sphere_errors(model)) < 1e-5
    a = model.blocks[0].attn
    torch.testing.assert_close(a.q_proj.weight.norm(dim=1), torch.ones(16))  # rows: d_model in
    torch.testing.assert_close(a.out_proj.weight.norm(dim=0), torch.ones(16))  # columns: out


def test_gpt_logits_are_scaled_cosines_and_states_unit():
    """With tied, unit-row embeddings and unit hidden states, z = s_z * cos(e_v, h)."""
    torch.manual_seed(0)
    model = GPT(gpt_config(placement="ngpt", bias=False))
    idx = batch("gpt")[0]
    states = []
    model.blocks[-1].register_forward_hook(lambda m, args, out: states.append(out))
    logits, _ = model(idx)
    torch.testing.assert_close(states[0].norm(dim=-1), torch.ones(3, 8))
    cosines = states[0] @ model.tok_emb.weight.T
    torch.testing.assert_close(logits, cosines * model.logit_scale.s_z())
    assert logits.abs().max() <= 1 + 1e-5


def test_other_placements_ignore_normalize_weights():
    torch.manual_seed(0)
    model = build("gpt", placement="pre")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.normalize_weights()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert isinstance(model.logit_scale, nn.Identity)
