"""Placement, norm and option variants against hand-written references and the papers' formulas."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models.gpt import GPT, GPTConfig
from models.layers import ACTIVATIONS, MLP, SLOTS, Attention, Block, Gate
from models.norms import (
    NORMS,
    BatchNorm,
    DyT,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    RMSNorm,
    build_norm,
    per_token_norms,
)
from models.placement import PLACEMENTS, SLOT_KINDS, Placement, get_placement, layer_placements
from models.vit import ViT, ViTConfig

# mix_fraction 0.5: one Post-LN and one Pre-LN layer; 2 groups: GroupNorm over 8 features, since
# groups of 2 normalize to +-1 and hide most of the input from Post-LN stacks.
TINY = dict(n_layer=2, n_head=2, n_embd=16, mix_fraction=0.5, norm_groups=2)
TINY_GPT = dict(vocab_size=23, block_size=8, **TINY)
TINY_VIT = dict(image_size=4, patch_size=2, **TINY)
OPTIONS = [dict(qk_norm=q, weight_norm=w) for q in (False, True) for w in (False, True)]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors gain nothing from threads; on a busy machine thread hand-offs dominate."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def build(model_name: str, **kw) -> nn.Module:
    if model_name == "gpt":
        return GPT(GPTConfig(**{**TINY_GPT, **kw}))
    return ViT(ViTConfig(**{**TINY_VIT, **kw}))


def batch(model_name: str, n: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    if model_name == "gpt":
        idx = torch.randint(0, 23, (n, 8))
        return idx, idx
    return torch.randn(n, 1, 4, 4), torch.randint(0, 10, (n,))


def randomize_small_params(module: nn.Module, seed: int = 0) -> None:
    """Non-trivial values for every 0-D/1-D parameter (norm gains and shifts, gates, DyT's a,
    biases), so references check their use and ReZero's gates are not at their zero init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim <= 1:
                p.copy_(0.5 + 0.5 * torch.rand(p.shape, generator=g))


# ---------------------------------------------------------------- placement equations


class Known(nn.Module):
    """A fixed, nonlinear stand-in for a sub-layer."""

    def __init__(self, scale: float, shift: float) -> None:
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.scale * x + self.shift)


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(0.7 * x + 0.1)


def g(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(-1.3 * x + 0.2)


def ln(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def known_block(placement: str) -> Block:
    block = Block(8, 2, get_placement(placement), norm="layernorm")
    randomize_small_params(block)
    block.attn, block.mlp = Known(0.7, 0.1), Known(-1.3, 0.2)
    return block


def test_sandwich_equation():
    b, x = known_block("sandwich"), torch.randn(2, 3, 8)
    h = x + ln(f(ln(x, b.attn_pre)), b.attn_branch_out)
    y = h + ln(g(ln(h, b.mlp_pre)), b.mlp_branch_out)
    torch.testing.assert_close(b(x), y)


def test_peri_is_sandwich_with_final_norm():
    assert get_placement("peri") is PLACEMENTS["sandwich"]
    assert isinstance(GPT(GPTConfig(**TINY_GPT, placement="peri")).final_norm, LayerNorm)


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
    model = GPT(GPTConfig(**TINY_GPT, placement="rezero"))
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
    model = GPT(GPTConfig(**cfg, n_layer=n_layer, mix_fraction=fraction))
    for i, block in enumerate(model.blocks):
        post = i < n_post
        assert isinstance(block.attn_post, LayerNorm) == post, i
        assert isinstance(block.mlp_post, LayerNorm) == post, i
        assert isinstance(block.attn_pre, LayerNorm) != post, i
        assert isinstance(block.mlp_pre, LayerNorm) != post, i
    assert isinstance(model.final_norm, LayerNorm)  # the last layers are Pre-LN


def test_mix_fraction_and_slot_validation():
    with pytest.raises(ValueError, match=r"mix_fraction must be in \[0, 1\]"):
        GPTConfig(**{**TINY_GPT, "mix_fraction": 1.5}, placement="mix")
    with pytest.raises(ValueError, match="layer_placements"):
        Block(8, 2, PLACEMENTS["mix"])
    with pytest.raises(ValueError, match="slot kind"):
        Placement("odd", pre="batch")
    assert set(SLOTS) == set(SLOT_KINDS)


# ---------------------------------------------------------------- norms


def test_dyt_formula_and_alpha_option():
    norm = DyT(12, alpha=0.8)
    randomize_small_params(norm, seed=1)
    x = torch.randn(3, 5, 12) * 4
    expected = norm.weight * torch.tanh(norm.alpha * x) + norm.bias
    torch.testing.assert_close(norm(x), expected)
    model = GPT(GPTConfig(**TINY_GPT, norm="dyt", dyt_alpha=0.2, qk_norm=True))
    dyts = [m for m in model.modules() if isinstance(m, DyT)]
    assert len(dyts) == 2 * 2 * 2 + 1  # pre slots, q/k norms, final norm
    assert all(m.alpha.ndim == 0 and m.alpha.item() == pytest.approx(0.2) for m in dyts)
    with pytest.raises(ValueError, match="dyt_alpha"):
        GPTConfig(**TINY_GPT, norm="dyt", dyt_alpha=0.0)


def test_groupnorm_one_group_is_layernorm():
    ours, ref = GroupNorm(16, eps=1e-5, groups=1), nn.LayerNorm(16, eps=1e-5)
    randomize_small_params(ours)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, 16) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x))


def test_groupnorm_groups_normalize_separately():
    norm = GroupNorm(12, eps=1e-5, groups=3)
    randomize_small_params(norm)
    x = torch.randn(2, 5, 12) * 2
    xg = x.view(2, 5, 3, 4)
    mean, var = xg.mean(-1, keepdim=True), xg.var(-1, unbiased=False, keepdim=True)
    expected = ((xg - mean) / torch.sqrt(var + 1e-5)).view(2, 5, 12) * norm.weight + norm.bias
    torch.testing.assert_close(norm(x), expected)


def test_groupnorm_one_feature_per_group_leaves_beta():
    """A group of one value: mean = x, var = 0, so (x - mean) / sqrt(eps) = 0 and y = beta,
    whatever x and gamma. The kernel's rounding of x - mean (~1e-6 here) is amplified by
    1 / sqrt(eps), hence the tolerance."""
    norm = GroupNorm(8, eps=1e-3, groups=8)
    randomize_small_params(norm)
    y = norm(torch.randn(4, 3, 8) * 10)
    torch.testing.assert_close(y, norm.bias.detach().expand(4, 3, 8), rtol=0, atol=1e-4)


def test_groupnorm_groups_must_divide_width():
    with pytest.raises(ValueError, match="norm_groups"):
        GPTConfig(**{**TINY_GPT, "norm_groups": 5}, norm="groupnorm")
    model = GPT(GPTConfig(**{**TINY_GPT, "norm_groups": 4}, norm="groupnorm"))
    assert model.final_norm.groups == 4


def batchnorm_ref(x: torch.Tensor, norm: BatchNorm) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])  # every (sample, token) position
    mean, var = flat.mean(0), flat.var(0, unbiased=False)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def test_batchnorm_train_uses_batch_eval_uses_running_statistics():
    torch.manual_seed(0)
    norm = BatchNorm(6)
    randomize_small_params(norm)
    x = torch.randn(4, 5, 6) * 3 + 2
    torch.testing.assert_close(norm(x), batchnorm_ref(x, norm))
    flat = x.reshape(-1, 6)
    torch.testing.assert_close(norm.running_mean, 0.1 * flat.mean(0))
    torch.testing.assert_close(norm.running_var, 0.9 + 0.1 * flat.var(0, unbiased=True))
    other = x.clone()
    other[1:] = torch.randn(3, 5, 6)
    assert not torch.allclose(norm(other)[0], norm(x)[0])  # train: the batch matters
    norm.eval()
    expected = (x - norm.running_mean) / torch.sqrt(norm.running_var + 1e-5)
    torch.testing.assert_close(norm(x), expected * norm.weight + norm.bias)
    torch.testing.assert_close(norm(other)[0], norm(x)[0])  # eval: it does not
    torch.testing.assert_close(norm(x[:1]), norm(x)[:1])


def test_vit_batchnorm_eval_is_per_sample():
    torch.manual_seed(0)
    model = ViT(ViTConfig(**TINY_VIT, norm="batchnorm"))
    images = torch.randn(4, 1, 4, 4)
    model.train()
    model(images)  # one step of running statistics
    assert not torch.allclose(model(images)[0][:1], model(images[:1])[0])
    model.eval()
    torch.testing.assert_close(model(images)[0][:1], model(images[:1])[0])


def test_instancenorm_over_tokens_per_sample_and_feature():
    norm = InstanceNorm(6)
    randomize_small_params(norm)
    x = torch.randn(3, 5, 6) * 2 + 1
    mean, var = x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)
    expected = (x - mean) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias
    torch.testing.assert_close(norm(x), expected)
    torch.testing.assert_close(norm(x[:1]), norm(x)[:1])  # no statistic spans samples


def test_none_is_identity_and_post_none_has_no_norms():
    assert isinstance(build_norm("none", 8), nn.Identity)
    model = GPT(GPTConfig(**TINY_GPT, placement="post", norm="none"))
    assert sum(p.numel() for b in model.blocks for p in b.parameters() if p.ndim == 1) == (
        2 * (4 * 16 + 4 * 16 + 16)  # only Linear biases remain
    )


@pytest.mark.parametrize("norm", ["batchnorm", "instancenorm"])
def test_gpt_refuses_cross_token_norms(norm):
    with pytest.raises(ValueError, match="leaks future tokens.*layernorm.*model=vit"):
        GPT(GPTConfig(**TINY_GPT, norm=norm))
    ViT(ViTConfig(**TINY_VIT, norm=norm))  # fine without a causal mask


def test_norm_registry_metadata_and_unknown_name():
    assert per_token_norms() == ["dyt", "groupnorm", "layernorm", "none", "rmsnorm"]
    assert NORMS["batchnorm"].mixes == {"batch", "sequence"}
    assert NORMS["instancenorm"].mixes == {"sequence"}
    with pytest.raises(ValueError, match="batchnorm.*dyt.*groupnorm.*instancenorm.*none"):
        GPTConfig(**TINY_GPT, norm="weightnorm")


# ---------------------------------------------------------------- options


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


@pytest.mark.parametrize("model_name", ["gpt", "vit"])
def test_weight_norm_keeps_init_and_linears(model_name):
    d, n_layer = 16, 3
    kw = dict(n_layer=n_layer, placement="deepnorm")  # beta-scaled init must survive
    torch.manual_seed(0)
    plain = build(model_name, **kw)
    torch.manual_seed(0)
    normed = build(model_name, **kw, weight_norm=True)
    inputs = batch(model_name)[:1]
    for bp, bn in zip(plain.blocks, normed.blocks, strict=True):
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            lin = getattr(bn.attn, name)
            assert isinstance(lin, nn.Linear)
            assert nn.utils.parametrize.is_parametrized(lin, "weight")
            torch.testing.assert_close(lin.weight, getattr(bp.attn, name).weight)
        torch.testing.assert_close(bn.mlp.fc2.weight, bp.mlp.fc2.weight)
    torch.testing.assert_close(normed(*inputs)[0], plain(*inputs)[0])
    g_params = n_layer * (4 * d + 4 * d + d)  # one g per output row of q, k, v, out, fc1, fc2
    assert normed.num_params() == plain.num_params() + g_params
    normed(*inputs)[0].square().mean().backward()
    g = normed.blocks[0].attn.v_proj.parametrizations.weight.original0
    assert g.grad is not None and torch.isfinite(g.grad).all()


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
    gap = (ACTIVATIONS["gelu"](x) - ACTIVATIONS["gelu_tanh"](x)).abs().max().item()
    assert 1e-5 < gap < 1e-3  # the tanh form approximates the erf form closely, not exactly
    for model_name in ("gpt", "vit"):
        model = build(model_name, placement="pre", norm="layernorm", activation="relu")
        assert all(b.mlp.activation == "relu" for b in model.blocks)
    with pytest.raises(ValueError, match="choose model.activation from: gelu, gelu_tanh, relu"):
        GPTConfig(**TINY_GPT, activation="swish")


# ---------------------------------------------------------------- every variant, whole models


@pytest.mark.parametrize(
    "opts", OPTIONS, ids=lambda o: f"qk{int(o['qk_norm'])}wn{int(o['weight_norm'])}"
)
@pytest.mark.parametrize("norm", per_token_norms())
@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_gpt_is_causal_for_every_variant(placement, norm, opts):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY_GPT, placement=placement, norm=norm, **opts)).eval()
    randomize_small_params(model)
    idx = torch.randint(0, 23, (2, 8))
    base, _ = model(idx)
    for t in (0, 4):
        changed = idx.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 23
        out, _ = model(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1])
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


VARIANTS = [("gpt", p, n) for p in sorted(PLACEMENTS) for n in per_token_norms()] + [
    ("vit", p, n) for p in sorted(PLACEMENTS) for n in sorted(NORMS)
]


@pytest.mark.parametrize("model_name,placement,norm", VARIANTS)
def test_forward_backward_finite_with_options(model_name, placement, norm):
    torch.manual_seed(0)
    model = build(model_name, placement=placement, norm=norm, qk_norm=True, weight_norm=True)
    _, loss = model(*batch(model_name))
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
