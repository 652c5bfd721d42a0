"""Each placement's equations against hand-written references of one block, and the registry."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from model_helpers import (
    NORM_REFS,
    attention,
    block_cfg,
    f,
    g,
    gelu,
    gpt_config,
    heads,
    known_block,
    linear,
    ln,
    randomize_small_params,
    vit_config,
)
from torch import nn

from models.config import PlacementConfig, ViTConfig
from models.gpt import GPT, GPTConfig
from models.layers import RESIDUALS, SLOTS, Block, Gate, ScaledNorm
from models.norms import LayerNorm, RMSNorm
from models.placement import (
    BLOCK_KINDS,
    PLACEMENTS,
    RESIDUAL_KINDS,
    SLOT_KINDS,
    Placement,
    deepnorm_alpha_beta,
    get_placement,
    layer_placements,
    resolve_scales,
)
from models.stack import BLOCKS
from models.vit import ViT


# ---------------------------------------------------------------- classic placements
def test_post_ln_equation():
    b, x = known_block("post"), torch.randn(2, 3, 8)
    h = ln(x + f(x), b.attn_post)
    torch.testing.assert_close(b(x), ln(h + g(h), b.mlp_post))


def test_pre_ln_equation():
    b, x = known_block("pre"), torch.randn(2, 3, 8)
    h = x + f(ln(x, b.attn_pre))
    torch.testing.assert_close(b(x), h + g(ln(h, b.mlp_pre)))


def test_deepnorm_equation():
    alpha = 1.7
    b, x = known_block("deepnorm", alpha=alpha), torch.randn(2, 3, 8)
    h = ln(alpha * x + f(x), b.attn_post)
    torch.testing.assert_close(b(x), ln(alpha * h + g(h), b.mlp_post))


def test_sandwich_equation():
    b, x = known_block("sandwich"), torch.randn(2, 3, 8)
    h = x + ln(f(ln(x, b.attn_pre)), b.attn_branch_out)
    y = h + ln(g(ln(h, b.mlp_pre)), b.mlp_branch_out)
    torch.testing.assert_close(b(x), y)


def test_peri_is_sandwich_with_final_norm():
    assert get_placement("peri") is PLACEMENTS["sandwich"]
    assert isinstance(GPT(gpt_config(placement="peri")).final_norm, LayerNorm)


def test_b2t_equation():
    """Takase et al. 2023: h = LN(x + Attn(x)); out = LN(x + h + FFN(h))."""
    b, x = known_block("b2t"), torch.randn(2, 3, 8)
    h = ln(x + f(x), b.attn_post)
    y = ln(x + h + g(h), b.mlp_post)
    torch.testing.assert_close(b(x), y)


def test_rezero_equation_with_trained_gates():
    b, x = known_block("rezero"), torch.randn(2, 3, 8)
    a1, a2 = b.attn_branch_out.weight, b.mlp_branch_out.weight
    assert a1.ndim == 0 and a1.item() != 0.0
    h = x + a1 * f(x)
    torch.testing.assert_close(b(x), h + a2 * g(h))


def test_rezero_is_identity_at_init_and_gates_learn():
    torch.manual_seed(0)
    model = GPT(gpt_config(placement="rezero"))
    assert isinstance(model.final_norm, nn.Identity)
    assert not any(isinstance(m, LayerNorm) for m in model.modules())
    x = torch.randn(2, 8, 16)
    for block in model.blocks:
        torch.testing.assert_close(block(x), x, rtol=0, atol=0)
    idx = torch.randint(0, 23, (2, 8))
    model(idx, idx)[1].backward()
    for block in model.blocks:
        for gate in (block.attn_branch_out, block.mlp_branch_out):
            assert isinstance(gate, Gate) and gate.weight.grad.abs().item() > 0


@pytest.mark.parametrize(
    "n_layer,fraction,n_post",
    # Hand-computed floor(fraction * L), Li et al. 2024.
    [(1, 0.25, 0), (2, 0.5, 1), (4, 0.25, 1), (6, 0.25, 1), (7, 0.5, 3), (8, 0.25, 2),
     (12, 0.25, 3), (24, 0.25, 6), (10, 0.3, 3), (100, 0.29, 29), (5, 0.0, 0), (5, 1.0, 5)],
)  # fmt: skip
def test_mix_uses_post_in_exactly_the_first_layers(n_layer, fraction, n_post):
    kinds = [p.name for p in layer_placements(PLACEMENTS["mix"], n_layer, fraction)]
    assert kinds == ["post"] * n_post + ["pre"] * (n_layer - n_post)
    cfg = dict(vocab_size=5, block_size=4, n_head=1, n_embd=4, placement="mix")
    mix = PlacementConfig(name="mix", mix_fraction=fraction)
    model = GPT(GPTConfig(**{**cfg, "placement": mix}, n_layer=n_layer))
    for i, block in enumerate(model.blocks):
        post = i < n_post
        assert isinstance(block.attn_post, LayerNorm) == post, i
        assert isinstance(block.mlp_post, LayerNorm) == post, i
        assert isinstance(block.attn_pre, LayerNorm) != post, i
        assert isinstance(block.mlp_pre, LayerNorm) != post, i
    assert isinstance(model.final_norm, LayerNorm)  # the last layers are Pre-LN


def test_mix_fraction_and_slot_validation():
    with pytest.raises(ValueError, match=r"mix_fraction must be in \[0, 1\]"):
        gpt_config(placement=PlacementConfig(name="mix", mix_fraction=1.5))
    with pytest.raises(ValueError, match="layer_placements"):
        Block(block_cfg(), PLACEMENTS["mix"])
    with pytest.raises(ValueError, match="slot kind"):
        Placement("odd", pre="batch")
    with pytest.raises(ValueError, match="unknown kind 'gate'"):
        Placement("odd", residual="gate")
    assert set(SLOTS) == set(SLOT_KINDS)
    assert set(RESIDUALS) == set(RESIDUAL_KINDS)
    assert set(BLOCKS) == set(BLOCK_KINDS)


@pytest.mark.parametrize(
    "placement,final",
    [("post", nn.Identity), ("pre", LayerNorm), ("deepnorm", nn.Identity), ("admin", nn.Identity),
     ("lns", LayerNorm), ("reorder", LayerNorm), ("hybrid", LayerNorm), ("ngpt", nn.Identity)],
)  # fmt: skip
def test_final_norm_where_the_stream_ends_unnormalized(placement, final):
    assert isinstance(GPT(gpt_config(placement=placement)).final_norm, final)
    assert isinstance(ViT(vit_config(placement=placement)).final_norm, final)


@pytest.mark.parametrize(
    "n_layer,alpha,beta",
    # Hand-computed: (2N)^(1/4) and (8N)^(-1/4).
    [(1, 1.189207, 0.594604), (6, 1.861210, 0.379918), (12, 2.213364, 0.319472),
     (18, 2.449490, 0.288675), (48, 3.130169, 0.225901)],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["decoder", "encoder"])
def test_deepnorm_alpha_beta_formulas(n_layer, alpha, beta, kind):
    a, b = deepnorm_alpha_beta(n_layer, kind)
    assert a == pytest.approx(alpha, abs=1e-5)
    assert b == pytest.approx(beta, abs=1e-5)


def test_deepnorm_model_alpha_and_overrides():
    m = GPT(gpt_config(**{"n_layer": 6}, placement="deepnorm"))
    assert m.alpha == pytest.approx(12**0.25) and m.beta == pytest.approx(48**-0.25)
    assert all(b.alpha == pytest.approx(12**0.25) for b in m.blocks)
    m = GPT(gpt_config(placement=PlacementConfig(name="deepnorm", alpha=3.0, beta=0.5)))
    assert (m.alpha, m.beta) == (3.0, 0.5)
    assert resolve_scales(PLACEMENTS["post"], 6, "decoder") == (1.0, 1.0)
    with pytest.raises(ValueError, match="placement=deepnorm"):
        resolve_scales(PLACEMENTS["post"], 6, "decoder", alpha=2.0)
    with pytest.raises(ValueError, match="> 0"):
        GPT(gpt_config(placement=PlacementConfig(name="deepnorm", beta=0.0)))


# ---------------------------------------------------------------- placements since 2020
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_admin_equation(norm):
    """Liu et al. 2020: x_i = LN(x_{i-1} * omega_i + F_i(x_{i-1})), omega_i per feature."""
    b, x = known_block("admin", norm), torch.randn(2, 3, 8)
    omega_a, omega_m = b.attn_residual.omega, b.mlp_residual.omega
    assert omega_a.shape == (8,) and not torch.equal(omega_a, omega_m)  # randomized, learnable
    n = NORM_REFS[norm]
    h = n(x * omega_a + f(x), b.attn_post)
    torch.testing.assert_close(b(x), n(h * omega_m + g(h), b.mlp_post))


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("layer", [1, 3])
def test_lns_equation(norm, layer):
    """Sun et al. 2025: Pre-LN whose norm outputs in layer l are scaled by 1 / sqrt(l)."""
    b, x = known_block("lns", norm, layer=layer), torch.randn(2, 3, 8)
    n, s = NORM_REFS[norm], 1 / math.sqrt(layer)
    h = x + f(n(x, b.attn_pre.norm) * s)
    torch.testing.assert_close(b(x), h + g(n(h, b.mlp_pre.norm) * s))


def test_lns_scales_each_layer_and_not_the_final_norm():
    model = GPT(gpt_config(**{"n_layer": 4}, placement="lns"))
    scales = [(b.attn_pre.scale, b.mlp_pre.scale) for b in model.blocks]
    # Hand-computed 1 / sqrt(l) for l = 1..4.
    expected = [1.0, 0.7071068, 0.5773503, 0.5]
    assert [a for a, _ in scales] == pytest.approx(expected) == [m for _, m in scales]
    assert all(isinstance(b.attn_pre, ScaledNorm) for b in model.blocks)
    assert type(model.final_norm) is LayerNorm


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_reorder_equation(norm):
    """OLMo 2: x_{l+1} = x_l + Norm(F(x_l)), no norm on the branch input."""
    b, x = known_block("reorder", norm), torch.randn(2, 3, 8)
    n = NORM_REFS[norm]
    h = x + n(f(x), b.attn_branch_out)
    torch.testing.assert_close(b(x), h + n(g(h), b.mlp_branch_out))
    assert isinstance(b.attn_pre, nn.Identity) and isinstance(b.mlp_post, nn.Identity)


@pytest.mark.parametrize("norm,norm_type", [("layernorm", LayerNorm), ("rmsnorm", RMSNorm)])
@pytest.mark.parametrize("causal", [True, False])
def test_hybrid_equation_with_real_attention(norm, norm_type, causal):
    """HybridNorm (Zhuo et al. 2025, as its official code computes it): each head's q, k and v
    normalized, Y = X + Attn(X), then X' = FFN(Norm(Y)) + Norm(Y)."""
    torch.manual_seed(0)
    b = Block(block_cfg(norm), PLACEMENTS["hybrid"], causal=causal)
    randomize_small_params(b)
    x = torch.randn(2, 5, 8)
    a, n = b.attn, NORM_REFS[norm]
    assert all(type(m) is norm_type for m in (a.q_norm, a.k_norm, a.v_norm))
    q, k, v = (
        n(heads(linear(x, p), 2), m)
        for p, m in zip((a.q_proj, a.k_proj, a.v_proj), (a.q_norm, a.k_norm, a.v_norm), strict=True)
    )
    y = x + linear(attention(q, k, v, 1 / math.sqrt(4), causal), a.out_proj)
    h = n(y, b.attn_post)
    expected = h + linear(gelu(linear(h, b.mlp.fc1)), b.mlp.fc2)
    torch.testing.assert_close(b(x), expected, atol=1e-5, rtol=1e-5)
    assert all(isinstance(m, nn.Identity) for m in (b.attn_pre, b.mlp_pre, b.mlp_post))


REFUSALS = [
    (name, field, value) for name, p in sorted(PLACEMENTS.items()) for field, value, _ in p.refuses
]


@pytest.mark.parametrize("placement,field,value", REFUSALS)
@pytest.mark.parametrize("model_name", ["gpt", "vit"])
def test_refused_options_fail_with_one_line_naming_the_fix(model_name, placement, field, value):
    config = gpt_config if model_name == "gpt" else vit_config
    if field not in {f.name for f in dataclasses.fields(GPTConfig if model_name == "gpt" else
                                                        ViTConfig)}:  # fmt: skip
        pytest.skip(f"model={model_name} has no {field} (emb_gain: the GPT's embeddings)")
    with pytest.raises(ValueError) as err:
        config(placement=placement, **{field: value})
    message = str(err.value)
    assert "\n" not in message and f"placement={placement}" in message, message
    assert f"model.{field}=" in message.split(":", 1)[1], message  # the fix names the field


def test_refusals_cover_what_the_placements_do_themselves():
    assert {(p, f) for p, f, _ in REFUSALS} == {
        ("hybrid", "qk_norm"),
        ("ngpt", "qk_norm"),
        ("ngpt", "weight_norm"),
        ("ngpt", "sigma_reparam"),
        ("ngpt", "init"),
        ("ngpt", "emb_gain"),
    }
