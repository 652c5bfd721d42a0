"""Parametrizations (models/param.py): muP and CompleteP equal SP at their base shape, match the
``mup`` package's learning rates and init scaling at other widths, and CompleteP's depth
corrections match Dey et al. 2025 (and EleutherAI's nanoGPT-mup CompleteP branch)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from models.config import GPTConfig, ParamConfig, ViTConfig
from models.gpt import GPT
from models.vit import ViT
from training.optim import build_adamw, param_groups
from training.optim_config import OptimConfig

mup = pytest.importorskip("mup")

LR, WD, EPS = 1e-3, 0.1, 1e-8
OPTIM = OptimConfig(lr=LR, weight_decay=WD, eps=EPS)


def gpt(width: int, depth: int = 2, seed: int = 0, **param) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(
        vocab_size=40, block_size=8, n_layer=depth, n_embd=width, n_head=4, tie_weights=False,
        param=ParamConfig(**param) if param else ParamConfig(),
    )  # fmt: skip
    return GPT(cfg)


def by_name(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, tuple]:
    """parameter name -> (lr, weight decay, eps) as the optimizer's groups hold them."""
    of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    return {
        name: (of[id(p)]["lr"], of[id(p)]["weight_decay"], of[id(p)].get("eps", EPS))
        for name, p in model.named_parameters()
    }


@pytest.mark.parametrize("name", ["mup", "completep"])
def test_equals_sp_at_the_base_shape(name: str) -> None:
    sp, other = gpt(64, 3), gpt(64, 3, name=name, base_width=64, base_depth=3)
    x = torch.randint(0, 40, (2, 8))
    torch.testing.assert_close(sp(x)[0], other(x)[0], rtol=0, atol=0)
    assert by_name(sp, build_adamw(sp, OPTIM)) == by_name(other, build_adamw(other, OPTIM))


@pytest.mark.parametrize("tie", [False, True])
def test_learning_rates_match_the_mup_package(tie: bool) -> None:
    """MuAdamW over the SP model at width 128 with base shapes from width 32 gives each
    parameter the lr and weight decay normlab's param=mup gives it."""

    def build(width: int, **param) -> GPT:
        cfg = GPTConfig(
            vocab_size=40, block_size=8, n_layer=2, n_embd=width, n_head=4, tie_weights=tie,
            param=ParamConfig(**param) if param else ParamConfig(),
        )  # fmt: skip
        return GPT(cfg)

    ours = build(128, name="mup", base_width=32)
    reference = build(128)
    # do_assert=False: the package asks for its MuReadout class on the head; normlab's head is
    # a plain Linear whose multiplier sits on the logits (test_forward_multipliers_by_hand)
    mup.set_base_shapes(reference, build(32), rescale_params=False, do_assert=False)
    expected = by_name(reference, mup.MuAdamW(param_groups(reference, OPTIM), lr=LR, eps=EPS))
    got = by_name(ours, build_adamw(ours, OPTIM))
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12), name
    # the hidden matrices' lr is 1/4 of the base's, the rest keep it
    assert got["blocks.0.mlp.fc1.weight"][0] == pytest.approx(LR / 4)
    assert got["tok_emb.weight"][0] == LR


def test_init_scales_as_the_mup_package() -> None:
    """Variance from width 32 to 256: hidden matrices 1/8 (as SP's fan-in init, which the mup
    package keeps), the readout constant (MuReadout's rescale) and the embeddings constant."""

    def var(model: GPT, name: str) -> float:
        return dict(model.named_parameters())[name].detach().double().var().item()

    small, large = gpt(32, name="mup", base_width=32), gpt(256, name="mup", base_width=32)
    assert var(large, "blocks.0.attn.q_proj.weight") / var(small, "blocks.0.attn.q_proj.weight") \
        == pytest.approx(1 / 8, rel=0.05)  # fmt: skip
    assert var(large, "lm_head.weight") / var(small, "lm_head.weight") == pytest.approx(1, rel=0.1)
    assert var(large, "tok_emb.weight") / var(small, "tok_emb.weight") == pytest.approx(1, rel=0.1)
    # the mup package's readout: kaiming at the width, times sqrt(width_mult) by set_base_shapes
    readout = {w: mup.MuReadout(w, 40) for w in (32, 256)}
    for layer in readout.values():
        holder = torch.nn.Sequential(layer)
        mup.set_base_shapes(holder, torch.nn.Sequential(mup.MuReadout(32, 40)))
    ratio = readout[256].weight.var().item() / readout[32].weight.var().item()
    assert ratio == pytest.approx(1, rel=0.1)
    # SP's readout, for contrast, shrinks with the width (Xavier: 2 / (fan_in + fan_out))
    sp_small, sp_large = gpt(32), gpt(256)
    assert var(sp_large, "lm_head.weight") / var(sp_small, "lm_head.weight") < 0.3


def test_forward_multipliers_by_hand() -> None:
    """muP at width 64 from base 16: the SP model with the same weights, its attention scaled
    by sqrt(b_h) / d_h, gives logits m_N = 4 times muP's."""
    ours = gpt(64, name="mup", base_width=16)
    twin = gpt(64)
    twin.load_state_dict(ours.state_dict(), strict=False)
    for block in twin.blocks:
        block.attn.softmax_scale = block.attn.scale = math.sqrt(16 / 4) / (64 / 4)
    x = torch.randint(0, 40, (2, 8))
    torch.testing.assert_close(ours(x)[0] * 4, twin(x)[0])


def test_completep_branch_multiplier_by_hand() -> None:
    """Pre-LN at depth 8 from base 2, alpha 1: x + F(LN x) / 4 on each sub-layer, which the SP
    model gives with each branch's last projection (weight and bias) divided by 4."""
    ours = gpt(32, depth=8, name="completep", base_width=32, base_depth=2)
    twin = gpt(32, depth=8)
    state = {k.replace(".inner", ""): v.clone() for k, v in ours.state_dict().items()}
    for key in list(state):
        if ".attn.out_proj." in key or ".mlp.fc2." in key:
            state[key] /= 4
    twin.load_state_dict(state)
    x = torch.randint(0, 40, (2, 8))
    torch.testing.assert_close(ours(x)[0], twin(x)[0])


# Dey et al. 2025, Table 1 (CompleteP column, alpha general) with Adam's eps as the authors'
# code sets it (Eq. 40), m_N = 4 and m_L = 2 here: hidden weights lr m_N^-1 m_L^(alpha-1), wd
# m_N, eps m_N^-1 m_L^-alpha; hidden biases and norm gains lr m_L^(alpha-1), eps m_N^-1
# m_L^-alpha; embeddings, readout and final norm lr and wd unchanged, eps m_N^-1.
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_completep_optimizer_table(alpha: float) -> None:
    model = gpt(128, depth=4, name="completep", base_width=32, base_depth=2, alpha=alpha)
    groups = build_adamw(model, OPTIM).param_groups
    of = {id(p): g for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    m_n, m_l = 4.0, 2.0

    def row(name: str) -> tuple[float, float, float]:
        g = of[id(named[name])]
        return g["lr"], g["weight_decay"], g["eps"]

    hidden = (LR / m_n * m_l ** (alpha - 1), WD * m_n, EPS / m_n * m_l**-alpha)
    vector = (LR * m_l ** (alpha - 1), 0.0, EPS / m_n * m_l**-alpha)
    assert row("blocks.1.attn.q_proj.weight") == pytest.approx(hidden)
    assert row("blocks.3.mlp.fc2.weight") == pytest.approx(hidden)
    assert row("blocks.0.attn.q_proj.bias") == pytest.approx(vector)
    assert row("blocks.2.attn_pre.weight") == pytest.approx(vector)
    for outside in ("tok_emb.weight", "lm_head.weight", "pos_emb.weight"):
        assert row(outside) == pytest.approx((LR, WD, EPS / m_n))
    assert row("final_norm.weight") == pytest.approx((LR, 0.0, EPS / m_n))
    assert model.derived()["branch_mult"] == pytest.approx(m_l**-alpha)


def test_vit_readout_and_patch_embedding() -> None:
    """The ViT's patch embedding (pixels in) and head (classes out) are vector-like: lr as
    given, init constant in width; its blocks' matrices scale as the GPT's."""

    def vit(width: int) -> ViT:
        torch.manual_seed(0)
        return ViT(ViTConfig(n_embd=width, n_layer=2, param=ParamConfig(name="mup", base_width=32)))

    small, large = vit(32), vit(256)
    groups = {id(p): g["lr"] for g in build_adamw(large, OPTIM).param_groups for p in g["params"]}
    assert groups[id(large.patch_embed.weight)] == LR
    assert groups[id(large.head.weight)] == LR
    assert groups[id(large.blocks[0].mlp.fc1.weight)] == pytest.approx(LR / 8)
    ratio = large.patch_embed.weight.var().item() / small.patch_embed.weight.var().item()
    assert ratio == pytest.approx(1, rel=0.15)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(placement="ngpt", param=ParamConfig(name="mup")), "use param=sp"),
        (dict(param=ParamConfig(name="mup", base_width=30)), "multiple of n_head"),
    ],
)
def test_refusals(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GPTConfig(vocab_size=40, n_head=4, **fields)


def test_param_config_refusals() -> None:
    with pytest.raises(ValueError, match=r"\[0.5, 1\]"):
        ParamConfig(name="completep", alpha=2.0)
    with pytest.raises(ValueError, match="choose one of"):
        ParamConfig(name="mu-p")


def test_sp_groups_unchanged() -> None:
    """SP keeps its two groups (decay, no decay) in order: old checkpoints' optimizer states."""
    groups = param_groups(gpt(32), OPTIM)
    assert [g["weight_decay"] for g in groups] == [WD, 0.0]
    assert all(p.ndim >= 2 for p in groups[0]["params"])
    assert dataclasses.asdict(ParamConfig()) == {
        "name": "sp", "base_width": None, "base_depth": None, "alpha": 1.0,
    }  # fmt: skip


@pytest.mark.parametrize("placement", ["sandwich", "post", "deepnorm", "lns", "mix", "admin"])
def test_every_placement_gets_a_scale_for_every_parameter(placement: str) -> None:
    """A branch norm the depth multiplier wraps (Peri-LN's) keeps the base model's name for it:
    the F14 pilot's Peri-LN at depth 8 once failed on blocks.0.attn_branch_out.inner.weight."""
    cfg = GPTConfig(vocab_size=40, n_layer=8, n_embd=64, n_head=4, placement=placement,
                    param=ParamConfig(name="completep", base_width=32, base_depth=2))  # fmt: skip
    model = GPT(cfg)
    assert {n for n, _ in model.named_parameters()} <= set(model.param_scales)
    eps = {n: s.eps for n, s in model.param_scales.items()}
    assert eps["blocks.0.mlp.fc1.weight"] == pytest.approx(1 / (2 * 4))  # m_N^-1 m_L^-1
    x = torch.randint(0, 40, (2, 8))
    assert torch.isfinite(model(x, x)[1])


def test_gpt2_init_is_refused_under_completep() -> None:
    """GPT-2's init divides out_proj and fc2 by sqrt(2L); CompleteP's Table 1 has no such factor
    (its branch multiplier is the depth scaling): one line naming the init to use."""
    with pytest.raises(ValueError, match="use init=xavier"):
        GPTConfig(vocab_size=40, n_layer=4, n_embd=32, n_head=4, init="gpt2",
                  param=ParamConfig(name="completep", base_depth=2))  # fmt: skip
    GPTConfig(vocab_size=40, n_layer=4, n_embd=32, n_head=4, init="gpt2",
              param=ParamConfig(name="mup", base_width=32))  # fmt: skip
