"""Models against independent references: torch's own ops, float64 formulas, the papers' numbers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models.gpt import GPT, GPTConfig
from models.layers import Block
from models.norms import NORMS, LayerNorm, RMSNorm, build_norm, per_token_norms
from models.placement import PLACEMENTS, deepnorm_alpha_beta, get_placement, resolve_scales
from models.vit import ViT, ViTConfig

TINY_GPT = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=16)
TINY_VIT = dict(
    image_size=8, patch_size=2, in_chans=1, num_classes=10, n_layer=2, n_head=2, n_embd=16
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors gain nothing from threads; on a busy machine thread hand-offs dominate."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def randomize_norm_params(module: nn.Module, seed: int = 0) -> None:
    """Give every norm non-trivial gains and shifts so the references check their use."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, LayerNorm | RMSNorm):
                m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))


# ---------------------------------------------------------------- norms


def test_layernorm_matches_torch_layernorm():
    torch.manual_seed(0)
    ours, ref = LayerNorm(24, eps=1e-5), nn.LayerNorm(24, eps=1e-5)
    randomize_norm_params(ours)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 5, 24) * 4 + 2
    torch.testing.assert_close(ours(x), ref(x))


def test_layernorm_uses_biased_variance():
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    mean, var = 3.0, ((4 + 1 + 0 + 9) / 4)  # divide by d, not d - 1
    expected = (x - mean) / math.sqrt(var + 1e-5)
    torch.testing.assert_close(LayerNorm(4)(x), expected)


def test_rmsnorm_matches_float64_formula():
    torch.manual_seed(0)
    norm = RMSNorm(32, eps=1e-6)
    randomize_norm_params(norm)
    x = torch.randn(4, 7, 32) * 3 + 1
    x64 = x.double()
    expected = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight.double()
    torch.testing.assert_close(norm(x).double(), expected, rtol=1e-5, atol=1e-5)


def test_rmsnorm_output_has_unit_rms_before_gain():
    x = torch.randn(10, 64) * 7
    y = RMSNorm(64, eps=1e-8)(x)
    rms = y.pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones(10), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y.norm(dim=-1), torch.full((10,), math.sqrt(64)), rtol=1e-4, atol=0)


@pytest.mark.parametrize("name", sorted(NORMS))
def test_zero_variance_input_is_finite(name):
    norm = build_norm(name, 16)
    for x in (torch.zeros(2, 16), torch.full((2, 16), 3.0)):
        assert torch.isfinite(norm(x)).all()


def test_unknown_norm_lists_choices():
    with pytest.raises(ValueError, match="layernorm.*rmsnorm"):
        build_norm("nonorm", 8)


# ---------------------------------------------------------------- placement equations


class Known(nn.Module):
    """A fixed, nonlinear stand-in for a sub-layer."""

    def __init__(self, scale: float, shift: float) -> None:
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.scale * x + self.shift)


def ln_ref(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def block_with_known_sublayers(placement: str, alpha: float = 1.0) -> Block:
    block = Block(8, 2, get_placement(placement), norm="layernorm", alpha=alpha)
    randomize_norm_params(block)
    block.attn, block.mlp = Known(0.7, 0.1), Known(-1.3, 0.2)
    return block


def test_post_ln_equation():
    b = block_with_known_sublayers("post")
    x = torch.randn(2, 3, 8)
    h = ln_ref(x + torch.tanh(0.7 * x + 0.1), b.attn_post)
    y = ln_ref(h + torch.tanh(-1.3 * h + 0.2), b.mlp_post)
    torch.testing.assert_close(b(x), y)


def test_pre_ln_equation():
    b = block_with_known_sublayers("pre")
    x = torch.randn(2, 3, 8)
    h = x + torch.tanh(0.7 * ln_ref(x, b.attn_pre) + 0.1)
    y = h + torch.tanh(-1.3 * ln_ref(h, b.mlp_pre) + 0.2)
    torch.testing.assert_close(b(x), y)


def test_deepnorm_equation():
    alpha = 1.7
    b = block_with_known_sublayers("deepnorm", alpha=alpha)
    x = torch.randn(2, 3, 8)
    h = ln_ref(alpha * x + torch.tanh(0.7 * x + 0.1), b.attn_post)
    y = ln_ref(alpha * h + torch.tanh(-1.3 * h + 0.2), b.mlp_post)
    torch.testing.assert_close(b(x), y)


@pytest.mark.parametrize(
    "placement,final", [("post", nn.Identity), ("pre", LayerNorm), ("deepnorm", nn.Identity)]
)
def test_final_norm_only_for_pre(placement, final):
    assert isinstance(GPT(GPTConfig(**TINY_GPT, placement=placement)).final_norm, final)
    assert isinstance(ViT(ViTConfig(**TINY_VIT, placement=placement)).final_norm, final)


# ---------------------------------------------------------------- DeepNorm


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
    m = GPT(GPTConfig(**{**TINY_GPT, "n_layer": 6}, placement="deepnorm"))
    assert m.alpha == pytest.approx(12**0.25) and m.beta == pytest.approx(48**-0.25)
    assert all(b.alpha == pytest.approx(12**0.25) for b in m.blocks)
    m = GPT(GPTConfig(**TINY_GPT, placement="deepnorm", deepnorm_alpha=3.0, deepnorm_beta=0.5))
    assert (m.alpha, m.beta) == (3.0, 0.5)
    assert resolve_scales(PLACEMENTS["post"], 6, "decoder") == (1.0, 1.0)
    with pytest.raises(ValueError, match="placement=deepnorm"):
        resolve_scales(PLACEMENTS["post"], 6, "decoder", alpha=2.0)
    with pytest.raises(ValueError, match="> 0"):
        GPT(GPTConfig(**TINY_GPT, placement="deepnorm", deepnorm_beta=0.0))


def xavier_std(linear: nn.Linear) -> float:
    fan_out, fan_in = linear.weight.shape
    return math.sqrt(2.0 / (fan_in + fan_out))


@pytest.mark.parametrize("model_name", ["gpt", "vit"])
def test_deepnorm_init_scales_v_out_fc1_fc2_only(model_name):
    torch.manual_seed(0)
    n_layer, width = 8, 128
    if model_name == "gpt":
        cfg = GPTConfig(
            vocab_size=11, n_layer=n_layer, n_head=4, n_embd=width, placement="deepnorm"
        )
        model = GPT(cfg)
    else:
        model = ViT(ViTConfig(n_layer=n_layer, n_head=4, n_embd=width, placement="deepnorm"))
    beta = (8 * n_layer) ** -0.25
    for block in model.blocks:
        for lin, gain in [
            (block.attn.q_proj, 1.0),
            (block.attn.k_proj, 1.0),
            (block.attn.v_proj, beta),
            (block.attn.out_proj, beta),
            (block.mlp.fc1, beta),
            (block.mlp.fc2, beta),
        ]:
            std = lin.weight.std().item()
            assert std == pytest.approx(gain * xavier_std(lin), rel=0.05)
            assert lin.weight.mean().abs().item() < 0.1 * std


def test_gpt2_init_std():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=11, n_layer=4, n_head=4, n_embd=128, init="gpt2"))
    assert m.blocks[0].attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.blocks[0].mlp.fc2.weight.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)


# ---------------------------------------------------------------- whole models


# Every placement x every norm the model accepts (the GPT refuses cross-token norms).
GPT_ALL = [(p, n) for p in sorted(PLACEMENTS) for n in per_token_norms()]
VIT_ALL = [(p, n) for p in sorted(PLACEMENTS) for n in sorted(NORMS)]


@pytest.mark.parametrize("placement,norm", GPT_ALL)
def test_gpt_is_causal(placement, norm):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY_GPT, placement=placement, norm=norm)).eval()
    idx = torch.randint(0, 37, (2, 16))
    base, _ = model(idx)
    for t in (0, 5, 14):
        changed = idx.clone()
        changed[:, t + 1 :] = torch.randint(0, 37, changed[:, t + 1 :].shape)
        out, _ = model(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1])
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


def norm_params(norm: str, d: int) -> int:
    two = 2 * d  # gain and shift
    return {"layernorm": two, "rmsnorm": d, "dyt": two + 1, "groupnorm": two, "batchnorm": two,
            "instancenorm": two, "none": 0}[norm]  # fmt: skip


def layer_kinds(placement: str, n_layer: int) -> list[str]:
    """Per-layer placement names; Mix-LN (default fraction 1/4): floor(L / 4) Post-LN, then Pre."""
    if placement != "mix":
        return [placement] * n_layer
    return ["post"] * (n_layer // 4) + ["pre"] * (n_layer - n_layer // 4)


def block_params(d: int, ratio: int, norm: str, placement: str) -> int:
    p = PLACEMENTS[placement]
    linears = 4 * (d * d + d) + (d * ratio * d + ratio * d) + (ratio * d * d + d)
    per_slot = {"none": 0, "norm": norm_params(norm, d), "gate": 1}
    return linears + 2 * sum(per_slot[kind] for kind in p.slots)


def blocks_params(d: int, ratio: int, norm: str, placement: str, n_layer: int) -> int:
    return sum(block_params(d, ratio, norm, k) for k in layer_kinds(placement, n_layer))


@pytest.mark.parametrize("placement,norm", GPT_ALL)
@pytest.mark.parametrize("tie", [True, False])
def test_gpt_forward_backward_and_param_count(placement, norm, tie):
    cfg = GPTConfig(**TINY_GPT, placement=placement, norm=norm, tie_weights=tie)
    model = GPT(cfg)
    V, T, d, L = cfg.vocab_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    expected = V * d + T * d + blocks_params(d, cfg.mlp_ratio, norm, placement, L)
    expected += norm_params(norm, d) * PLACEMENTS[placement].final_norm + (0 if tie else V * d)
    assert model.num_params() == expected
    idx = torch.randint(0, V, (2, T))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, T, V)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("placement,norm", VIT_ALL)
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_forward_backward_and_param_count(placement, norm, pool):
    cfg = ViTConfig(**TINY_VIT, placement=placement, norm=norm, pool=pool)
    model = ViT(cfg)
    d, n_tok = cfg.n_embd, cfg.num_patches + (pool == "cls")
    expected = (cfg.patch_size**2 * cfg.in_chans + 1) * d + n_tok * d + (pool == "cls") * d
    expected += blocks_params(d, cfg.mlp_ratio, norm, placement, cfg.n_layer)
    expected += norm_params(norm, d) * PLACEMENTS[placement].final_norm + (d + 1) * 10
    assert model.num_params() == expected
    images, labels = torch.randn(3, 1, 8, 8), torch.tensor([0, 3, 9])
    logits, loss = model(images, labels)
    assert logits.shape == (3, 10)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_vit_patchify_order():
    model = ViT(ViTConfig(**{**TINY_VIT, "image_size": 4, "patch_size": 2}))
    img = torch.arange(16.0).reshape(1, 1, 4, 4)
    patches = model.patchify(img)
    torch.testing.assert_close(patches[0, 0], torch.tensor([0.0, 1.0, 4.0, 5.0]))
    torch.testing.assert_close(patches[0, 3], torch.tensor([10.0, 11.0, 14.0, 15.0]))


@pytest.mark.parametrize(
    "cfg_cls,kwargs,match",
    [
        (GPTConfig, dict(n_embd=30, n_head=4), "divisible"),
        (GPTConfig, dict(n_layer=0), "positive"),
        (GPTConfig, dict(init="orthogonal"), "xavier"),
        (ViTConfig, dict(image_size=9, patch_size=2), "divisible"),
        (ViTConfig, dict(pool="max"), "cls"),
    ],
)
def test_invalid_configs_fail_with_fix(cfg_cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cfg_cls(**kwargs)


def test_unknown_placement_lists_choices():
    with pytest.raises(ValueError, match="deepnorm.*post.*pre"):
        GPT(GPTConfig(**TINY_GPT, placement="middle"))


# ---------------------------------------------------------------- F1 at initialization


def last_fc2_grad_norm(placement: str, n_layer: int, seed: int) -> float:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=64, block_size=32, n_layer=n_layer, n_head=2, n_embd=32)
    model = GPT(GPTConfig(**{**cfg.__dict__, "placement": placement}))
    idx, targets = torch.randint(0, 64, (8, 32)), torch.randint(0, 64, (8, 32))
    model(idx, targets)[1].backward()
    return model.blocks[-1].mlp.fc2.weight.grad.norm().item()


def test_f1_last_layer_gradient_vs_depth():
    """Xiong et al. 2020, Thm 1: flat in depth for Post-LN, ~1/sqrt(L) for Pre-LN."""
    depths, seeds = (2, 32), range(3)
    mean = {
        (p, L): sum(last_fc2_grad_norm(p, L, s) for s in seeds) / len(seeds)
        for p in ("post", "pre")
        for L in depths
    }
    post_ratio = mean[("post", 32)] / mean[("post", 2)]
    pre_ratio = mean[("pre", 32)] / mean[("pre", 2)]
    assert 0.6 < post_ratio < 1.6, post_ratio
    assert pre_ratio < 0.4, pre_ratio  # 1/sqrt(16) = 0.25


# ---------------------------------------------------------------- weights and outputs pinned
def fingerprint(tensors) -> tuple[float, float, float]:
    """Sum, sum of squares and a sine-weighted sum (order-sensitive) in float64."""
    s1 = s2 = s3 = 0.0
    for t in tensors:
        t = t.detach().double().flatten()
        s1 += t.sum().item()
        s2 += t.square().sum().item()
        s3 += (t * torch.sin(torch.arange(t.numel(), dtype=torch.float64))).sum().item()
    return s1, s2, s3


# Measured with the models as they were before GPTConfig and ViTConfig shared BlockConfig; the
# same config and seed must keep giving the same initial weights and outputs. (Bit-identical on
# the machine that recorded them; the tolerance leaves room for other CPUs' kernels only.)
PINNED = [
    ("gpt", {"placement": "post"},
     (79.3850462882674, 447.1867578839473, 10.565881826421487),
     (3.7539251522830455, 19.174722669674022, 0.6756894990896051)),
    ("gpt", {"placement": "pre", "norm": "rmsnorm", "qk_norm": True, "weight_norm": True},
     (515.0989457516825, 861.7979507375065, 42.73559206034965),
     (8.622112879136694, 18.65003565426233, 0.47878347858520065)),
    ("gpt", {"placement": "deepnorm", "init": "gpt2", "tie_weights": False},
     (94.78162616082454, 97.58455095077453, 10.817308822639653),
     (2.367546865875738, 20.291701536202332, 0.01141156913414021)),
    ("gpt", {"placement": "mix", "mix_fraction": 0.5, "norm": "dyt"},
     (98.8850462882674, 464.9367578839473, 12.501569305766987),
     (3.6142993410772633, 13.038954559589014, -0.004221482941081619)),
    ("gpt", {"placement": "b2t", "norm": "groupnorm", "norm_groups": 4},
     (79.3850462882674, 447.1867578839473, 10.565881826421487),
     (6.035985005131806, 20.900140285631707, 1.3018729408709535)),
    ("gpt", {"placement": "rezero", "activation": "relu"},
     (-16.614953711732596, 351.1867578839473, -1.0482430496515136),
     (3.6074320576103673, 13.044469855105088, 0.009069575875180282)),
    ("vit", {"placement": "sandwich", "pool": "mean", "norm": "batchnorm"},
     (420.6307308747273, 832.8315068033683, 69.07147935292735),
     (2.6271862983703613, 28.587648477122954, 1.087309007045632)),
    ("vit", {"placement": "post", "norm": "rmsnorm"},
     (83.13693411056738, 459.54035583651415, 26.67266916362331),
     (1.9197913706302643, 51.727474622674535, 0.5325544491647995)),
]  # fmt: skip


@pytest.mark.parametrize("model_name,kwargs,weights,outputs", PINNED)
def test_same_config_and_seed_give_the_pinned_weights_and_outputs(
    model_name, kwargs, weights, outputs
):
    torch.manual_seed(0)
    if model_name == "gpt":
        model = GPT(
            GPTConfig(vocab_size=37, block_size=16, n_layer=3, n_head=2, n_embd=16, **kwargs)
        )
        idx = torch.arange(32).reshape(2, 16)
        inputs = (idx * 7 % 37, idx % 37)
    else:
        model = ViT(ViTConfig(n_layer=3, n_head=2, n_embd=16, **kwargs))
        inputs = (torch.linspace(-2, 2, 3 * 64).reshape(3, 1, 8, 8), torch.tensor([0, 3, 9]))
    logits, loss = model(*inputs)
    assert fingerprint(model.state_dict().values()) == pytest.approx(weights, rel=1e-6, abs=1e-9)
    assert fingerprint([logits, loss]) == pytest.approx(outputs, rel=1e-5, abs=1e-6)
