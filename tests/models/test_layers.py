"""Attention and MLP against written-out references: qk-norm, the q/k probes read, activations."""

from __future__ import annotations

import math

import pytest
import torch
from model_helpers import build, gpt_config, randomize_small_params
from torch import nn

from models.activations import ACTIVATIONS, get_activation
from models.layers import MLP, Attention
from models.norms import DyT, LayerNorm, RMSNorm, build_norm


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
def test_qk_norm_bounds_attention_logits(norm):
    """Per head, |q| <= max|gain| * sqrt(hs) after the norm, so |q.k| / sqrt(hs) is bounded by
    gq * gk * sqrt(hs) whatever the projection weights (Cauchy-Schwarz)."""
    torch.manual_seed(0)
    n_embd, n_head, hs, gain = 32, 4, 8, 3.0
    x = torch.randn(2, 6, n_embd)

    def max_logit(attn: Attention) -> float:
        with torch.no_grad():
            for proj in (attn.q_proj, attn.k_proj):
                proj.weight.mul_(1000.0)
            q, k = attn.qk(x)
            return (q @ k.transpose(-2, -1) / math.sqrt(hs)).abs().max().item()

    torch.manual_seed(1)
    plain = max_logit(Attention(n_embd, n_head, causal=False))
    torch.manual_seed(1)
    normed = Attention(n_embd, n_head, causal=False, qk_norm=lambda d: build_norm(norm, d))
    with torch.no_grad():
        normed.q_norm.weight.fill_(gain)
        normed.k_norm.weight.fill_(gain)
    bounded = max_logit(normed)
    assert bounded <= gain * gain * math.sqrt(hs) * (1 + 1e-5), bounded
    assert bounded > 0.5 * gain * gain * math.sqrt(hs)  # aligned heads come near the bound
    assert plain > 1e3, plain


@pytest.mark.parametrize("bias", [True, False])
def test_qk_returns_what_the_dot_product_uses(bias):
    torch.manual_seed(0)
    attn = Attention(16, 2, causal=True, bias=bias, qk_norm=lambda d: build_norm("rmsnorm", d))
    randomize_small_params(attn)
    x = torch.randn(2, 5, 16)
    q, k = attn.qk(x)
    heads = attn.q_proj(x).view(2, 5, 2, 8).transpose(1, 2)  # (B, nh, T, hs)
    rms = torch.sqrt(heads.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(q, heads / rms * attn.q_norm.weight)
    v = attn.v_proj(x).view(2, 5, 2, 8).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 16)
    torch.testing.assert_close(attn(x), attn.out_proj(y))


@pytest.mark.parametrize(
    "model_name,norm,qk_type",
    [("gpt", "layernorm", LayerNorm), ("gpt", "rmsnorm", RMSNorm), ("gpt", "dyt", DyT),
     ("gpt", "groupnorm", LayerNorm), ("gpt", "none", LayerNorm),
     ("vit", "batchnorm", LayerNorm), ("vit", "instancenorm", LayerNorm)],
)  # fmt: skip
def test_qk_norm_slots(model_name, norm, qk_type):
    for block in build(model_name, norm=norm, qk_norm=True).blocks:
        for qk in (block.attn.q_norm, block.attn.k_norm):
            assert type(qk) is qk_type and qk.weight.shape == (8,)  # per head: n_embd / n_head
    for block in build(model_name, norm=norm).blocks:
        assert isinstance(block.attn.q_norm, nn.Identity)


# ---------------------------------------------------------------- MLP activations
ACTIVATION_FORMULAS = {  # written out from the definitions, not through F.gelu / F.relu
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: (
        0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_mlp_activation_matches_its_formula(name):
    torch.manual_seed(0)
    mlp = MLP(8, mlp_ratio=2, activation=name)
    x = torch.randn(3, 5, 8)
    expected = mlp.fc2(ACTIVATION_FORMULAS[name](mlp.fc1(x)))
    torch.testing.assert_close(mlp(x), expected, atol=1e-6, rtol=1e-5)


def test_gelu_variants_differ_and_models_take_the_activation():
    x = torch.linspace(-3, 3, 61)
    gap = (get_activation("gelu")(x) - get_activation("gelu_tanh")(x)).abs().max().item()
    assert 1e-5 < gap < 1e-3  # the tanh form approximates the erf form closely, not exactly
    for model_name in ("gpt", "vit"):
        model = build(model_name, placement="pre", norm="layernorm", activation="relu")
        assert all(b.mlp.activation == "relu" for b in model.blocks)
    with pytest.raises(ValueError, match="choose model.activation from: gelu, gelu_tanh, relu"):
        gpt_config(activation="swish")
