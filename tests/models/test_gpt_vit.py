"""Whole GPT and ViT models: causality, parameter counts, every variant's forward and backward,
config checks, and weights and outputs pinned to their values before the config refactor."""

from __future__ import annotations

import pytest
import torch
from model_helpers import batch, build, gpt_config, randomize_small_params, refused, vit_config

from models.catalog import NORMS, per_token_norms
from models.config import NormConfig, PlacementConfig
from models.gpt import GPT, GPTConfig
from models.placement import PLACEMENTS
from models.vit import ViT, ViTConfig

OPTIONS = [dict(qk_norm=q, weight_norm=w) for q in (False, True) for w in (False, True)]


# ---------------------------------------------------------------- every variant
# Every placement x norm x option the GPT builds (test_placements.py checks the refusals).
CAUSAL_VARIANTS = [
    pytest.param(p, n, o, id=f"{p}-{n}-qk{int(o['qk_norm'])}wn{int(o['weight_norm'])}")
    for p in sorted(PLACEMENTS)
    for n in per_token_norms()
    for o in OPTIONS
    if not refused(p, **o)
]


@pytest.mark.parametrize("placement,norm,opts", CAUSAL_VARIANTS)
def test_gpt_is_causal_for_every_variant(placement, norm, opts):
    torch.manual_seed(0)
    model = GPT(gpt_config(placement=placement, norm=norm, **opts)).eval()
    randomize_small_params(model)
    idx = torch.randint(0, 23, (2, 8))
    base, _ = model(idx)
    for t in (0, 4):
        changed = idx.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 23
        out, _ = model(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1])
        # later positions do read the changed tokens (by as little as 1e-7 where a saturating
        # point-wise norm, DyT or Derf, follows DeepNorm's up-weighted residual at this width)
        assert not torch.equal(out[:, t + 1 :], base[:, t + 1 :])


VARIANTS = [("gpt", p, n) for p in sorted(PLACEMENTS) for n in per_token_norms()] + [
    ("vit", p, n) for p in sorted(PLACEMENTS) for n in sorted(NORMS)
]


@pytest.mark.parametrize("model_name,placement,norm", VARIANTS)
def test_forward_backward_finite_with_options(model_name, placement, norm):
    torch.manual_seed(0)
    opts = {k: True for k in ("qk_norm", "weight_norm") if not refused(placement, **{k: True})}
    model = build(model_name, placement=placement, norm=norm, **opts)
    _, loss = model(*batch(model_name))
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


# ---------------------------------------------------------------- parameter counts
def norm_params(norm: str, d: int) -> int:
    two = 2 * d  # gain and shift
    return {"layernorm": two, "rmsnorm": d, "dyt": two + 1, "derf": two + 2, "groupnorm": two,
            "batchnorm": two, "seednorm": 3 * d,
            "instancenorm": two, "none": 0}[norm]  # fmt: skip


def layer_kinds(placement: str, n_layer: int, fraction: float) -> list[str]:
    """Per-layer placement names; Mix-LN: floor(fraction * L) Post-LN layers, then Pre-LN."""
    if placement != "mix":
        return [placement] * n_layer
    n_post = int(fraction * n_layer)
    return ["post"] * n_post + ["pre"] * (n_layer - n_post)


def block_params(d: int, n_head: int, ratio: int, norm: str, placement: str) -> int:
    """Linears, plus what the placement adds: slot norms or gates, Admin's two omegas,
    HybridNorm's per-head q/k/v norms, nGPT's alpha_A, alpha_M, s_qk and s_u."""
    p = PLACEMENTS[placement]
    linears = 4 * (d * d + d) + (d * ratio * d + ratio * d) + (ratio * d * d + d)
    if p.block == "normalized":
        return linears + 3 * d + ratio * d
    per_slot = {"none": 0, "norm": norm_params(norm, d), "gate": 1}
    slots = sum(per_slot[kind] for kind in (*p.attn_slots, *p.mlp_slots))
    if p.attn_slots[1] == p.mlp_slots[1] == "gate":
        slots -= 1  # ReZero: one gate for the layer's two sub-layers (placement.gates=layer)
    omegas = 2 * d if p.residual == "omega" else 0
    qkv = 3 * norm_params(NORMS[norm].qk, d // n_head) if p.qkv_norm else 0
    return linears + slots + omegas + qkv


def stack_params(cfg, placement: str, n_out: int) -> int:
    """The blocks, the final norm and nGPT's logit scale s_z."""
    d, p = cfg.n_embd, PLACEMENTS[placement]
    kinds = layer_kinds(placement, cfg.n_layer, cfg.placement.mix_fraction)
    total = sum(block_params(d, cfg.n_head, cfg.mlp_ratio, cfg.norm.name, k) for k in kinds)
    total += norm_params(cfg.norm.name, d) * p.final_norm
    return total + (n_out if p.block == "normalized" else 0)


GPT_ALL = [(p, n) for p in sorted(PLACEMENTS) for n in per_token_norms()]
VIT_ALL = [(p, n) for p in sorted(PLACEMENTS) for n in sorted(NORMS)]


@pytest.mark.parametrize("placement,norm", GPT_ALL)
@pytest.mark.parametrize("tie", [True, False])
def test_gpt_forward_backward_and_param_count(placement, norm, tie):
    cfg = gpt_config(placement=placement, norm=norm, tie_weights=tie)
    model = GPT(cfg)
    V, T, d = cfg.vocab_size, cfg.block_size, cfg.n_embd
    expected = V * d + T * d + stack_params(cfg, placement, V) + (0 if tie else V * d)
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
    cfg = ViTConfig(image_size=8, n_layer=2, n_head=2, n_embd=16, placement=placement, norm=norm,
                    pool=pool)  # fmt: skip
    model = ViT(cfg)
    d, n_tok = cfg.n_embd, cfg.num_patches + (pool == "cls")
    expected = (cfg.patch_size**2 * cfg.in_chans + 1) * d + n_tok * d + (pool == "cls") * d
    expected += stack_params(cfg, placement, 10) + (d + 1) * 10
    assert model.num_params() == expected
    images, labels = torch.randn(3, 1, 8, 8), torch.tensor([0, 3, 9])
    logits, loss = model(images, labels)
    assert logits.shape == (3, 10)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_vit_patchify_order():
    model = ViT(vit_config(**{"image_size": 4, "patch_size": 2}))
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
        GPT(gpt_config(placement="middle"))


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
    ("gpt", {"placement": PlacementConfig(name="mix", mix_fraction=0.5), "norm": "dyt"},
     (98.8850462882674, 464.9367578839473, 12.501569305766987),
     (3.6142993410772633, 13.038954559589014, -0.004221482941081619)),
    ("gpt", {"placement": "b2t", "norm": NormConfig(name="groupnorm", groups=4)},
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
