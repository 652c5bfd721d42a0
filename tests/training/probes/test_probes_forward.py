"""The forward probes of the residual stream, attention and logits, against a manual forward.

The model has qk-norm and dropout, so the attention the probes read must be the one the layer
computes (normalized q and k, causal mask) and the pass must run without dropout.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from models.gpt import GPT, GPTConfig
from models.layers import Attention
from models.vit import ViT, ViTConfig
from tests.probe_helpers import (
    TINY,
    Snapshots,
    TinyTask,
    batches,
    fit,
    one_thread,  # noqa: F401  (autouse, module scope)
)
from training.probe_config import PROBES, ProbeConfig
from training.probes.attention import AttnEntropy, head_entropies
from training.probes.forward import run_forward_probes
from training.probes.measures import ActMax, BlockCos, LogZ
from training.probes.registry import probe_callbacks

QK = dict(TINY, qk_norm=True, dropout=0.1)
FORWARD = [n for n, spec in PROBES.items() if spec.measure is not None]


@pytest.fixture(scope="module")
def qk_fit(tmp_path_factory):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**QK)))
    initial = copy.deepcopy(task.model)
    snaps = Snapshots()
    probes = ProbeConfig(enabled=FORWARD, every={n: 1 for n in FORWARD}, batch_size=4)
    _, logger = fit(task, [snaps, *probe_callbacks(probes)], 3, tmp_path_factory.mktemp("qk"))
    return initial, snaps, logger


def explicit_softmax_entropy(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per-head mean row entropy from an explicit softmax of q k^T / sqrt(d), causal mask."""
    B, nh, T, hs = q.shape
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(hs)
    allowed = torch.arange(T)[None, :] <= torch.arange(T)[:, None]  # key j <= query i
    weights = torch.where(allowed, torch.exp(scores - scores.amax(-1, keepdim=True)), 0.0)
    p = weights / weights.sum(-1, keepdim=True)
    logp = torch.where(allowed, torch.log(torch.where(allowed, p, 1.0)), 0.0)
    rows = -(p * logp).sum(-1)  # (B, nh, T)
    return rows.mean(dim=(0, 2))


def manual_qk(block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k of one block, head-split and layer-normed over the head dimension by hand."""
    attn = block.attn
    x_in = block.attn_pre(x)
    hs = x_in.shape[-1] // attn.n_head

    def heads(t: torch.Tensor, norm) -> torch.Tensor:
        t = t.unflatten(-1, (attn.n_head, hs)).transpose(1, 2)  # (B, nh, T, hs)
        mean = t.mean(-1, keepdim=True)
        var = ((t - mean) ** 2).mean(-1, keepdim=True)
        return (t - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    q = heads(x_in @ attn.q_proj.weight.T + attn.q_proj.bias, attn.q_norm)
    k = heads(x_in @ attn.k_proj.weight.T + attn.k_proj.bias, attn.k_norm)
    return q, k


@torch.no_grad()
def manual_pass(model: GPT, idx: torch.Tensor) -> dict[str, float]:
    """Every forward-probe value of the new probes, computed without hooks."""
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
    out = {}
    for i, block in enumerate(model.blocks):
        heads = explicit_softmax_entropy(*manual_qk(block, x))
        out[f"attn/entropy/layer_{i}"] = float(heads.mean())
        out[f"attn/entropy_min/layer_{i}"] = float(heads.min())
        h = block(x)
        out[f"act_max/layer_{i}"] = float(h.abs().max())
        cos = (x * h).sum(-1) / (x.norm(dim=-1) * h.norm(dim=-1))
        out[f"block_cos/layer_{i}"] = float(cos.mean())
        x = h
    logits = model.lm_head(model.final_norm(x))
    log_z = torch.log(torch.exp(logits.double()).sum(-1))
    out["logits/log_z"] = float(log_z.mean())
    out["logits/log_z_rms"] = float(log_z.pow(2).mean().sqrt())
    return out


def test_new_forward_probes_equal_a_manual_pass_at_every_step(qk_fit):
    initial, snaps, logger = qk_fit
    probe_inputs = batches(2, seed=1)[0][0][:4]
    model = copy.deepcopy(initial).eval()
    for step in range(3):
        model.load_state_dict(snaps.weights[step])
        expected = manual_pass(model, probe_inputs)
        for key, value in expected.items():
            assert logger.value(step, key) == pytest.approx(value, rel=1e-4, abs=1e-6), key
        for i in range(TINY["n_layer"]):
            mean, low = (
                logger.value(step, f"attn/{m}/layer_{i}") for m in ("entropy", "entropy_min")
            )
            assert 0.0 < low <= mean < math.log(TINY["block_size"])


def test_uniform_attention_has_the_entropy_of_log_row_length():
    """q = 0 makes every allowed key equally likely: row i of a causal layer has entropy
    log(i + 1); without the mask every row has log T."""
    T = 5
    attn = Attention(n_embd=4, n_head=2, causal=True)
    with torch.no_grad():
        attn.q_proj.weight.zero_()
        attn.q_proj.bias.zero_()
    x = torch.randn(3, T, 4)
    expected = sum(math.log(i + 1) for i in range(T)) / T
    assert head_entropies(attn, x).tolist() == pytest.approx([expected] * 2, rel=1e-6)
    attn.causal = False
    assert head_entropies(attn, x).tolist() == pytest.approx([math.log(T)] * 2, rel=1e-6)


def test_one_hot_attention_has_zero_entropy_and_act_probes_by_hand():
    attn = Attention(n_embd=2, n_head=1, causal=False)
    with torch.no_grad():  # q = 100 x_0, k = x_0: each row puts all weight on the one key x_0 > 0
        attn.q_proj.weight.copy_(torch.tensor([[100.0, 0.0], [0.0, 0.0]]))
        attn.k_proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
        attn.q_proj.bias.zero_()
        attn.k_proj.bias.zero_()
    x = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]])
    assert float(head_entropies(attn, x)) == pytest.approx(0.0, abs=1e-12)
    block_in = torch.tensor([[[3.0, 4.0], [1.0, 0.0]]])
    block_out = torch.tensor([[[-6.0, -8.0], [0.0, 2.0]]])  # cos -1 and 0
    assert float(BlockCos().measure(block_in, block_out)) == pytest.approx(-0.5)
    assert float(ActMax().measure(block_in, block_out)) == 8.0


def test_log_z_of_known_logits():
    logits = torch.log(torch.tensor([[[1.0, 1.0, 2.0], [0.5, 0.25, 0.25]]]))  # Z = 4 and 1
    out = LogZ().read(logits, step=0)
    assert float(out["logits/log_z"]) == pytest.approx(math.log(4) / 2)
    assert float(out["logits/log_z_rms"]) == pytest.approx(math.log(4) / math.sqrt(2))


def test_forward_probes_on_a_vit_give_every_layer():
    torch.manual_seed(0)
    vit = ViT(ViTConfig(n_layer=2, n_head=2, n_embd=16))
    measures = [AttnEntropy(), ActMax(), BlockCos(), LogZ()]
    out = run_forward_probes(vit, torch.randn(3, 1, 8, 8), measures, step=0)
    for prefix in ("attn/entropy", "attn/entropy_min", "act_max", "block_cos"):
        assert [k for k in out if k.startswith(prefix + "/")] == [
            f"{prefix}/layer_0",
            f"{prefix}/layer_1",
        ]
    # bidirectional attention over 17 tokens (16 patches + class token): entropy <= log 17
    assert 0.0 < out["attn/entropy/layer_0"] <= math.log(17) + 1e-6
    assert "logits/log_z" in out and vit.training
