"""Weight init against its formulas: Xavier, GPT-2, DeepNorm's beta, DS-Init, weight norm; F1."""

from __future__ import annotations

import math

import pytest
import torch
from model_helpers import batch, build
from torch import nn

from models.gpt import GPT, GPTConfig
from models.placement import PLACEMENTS
from models.vit import ViT, ViTConfig


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


@pytest.mark.parametrize("model_name", ["gpt", "vit"])
def test_ds_init_scales_block_l_by_one_over_sqrt_l(model_name):
    """DS-Init (Zhang et al. 2019): the init std of layer l's weights times 1/sqrt(l), l 1-based;
    with DeepNorm's beta on v, out, fc1 and fc2 as well."""
    torch.manual_seed(0)
    kw = dict(n_layer=4, n_head=4, n_embd=128, init="ds", placement="deepnorm")
    model = GPT(GPTConfig(vocab_size=11, **kw)) if model_name == "gpt" else ViT(ViTConfig(**kw))
    beta = 32**-0.25  # (8N)^(-1/4), N = 4
    for layer, block in enumerate(model.blocks, start=1):
        for lin, gain in [(block.attn.q_proj, 1.0), (block.attn.k_proj, 1.0),
                          (block.attn.v_proj, beta), (block.mlp.fc2, beta)]:  # fmt: skip
            expected = gain * xavier_std(lin) / math.sqrt(layer)
            assert lin.weight.std().item() == pytest.approx(expected, rel=0.05), (layer, lin)


@pytest.mark.parametrize("placement", sorted(p for p in PLACEMENTS if p != "ngpt"))
def test_ds_init_combines_with_every_placement(placement):
    torch.manual_seed(0)
    plain = build("gpt", placement=placement)
    torch.manual_seed(0)
    scaled = build("gpt", placement=placement, init="ds")
    for layer, (bp, bs) in enumerate(zip(plain.blocks, scaled.blocks, strict=True), start=1):
        torch.testing.assert_close(bs.mlp.fc1.weight, bp.mlp.fc1.weight / math.sqrt(layer))
    torch.testing.assert_close(scaled.tok_emb.weight, plain.tok_emb.weight)  # not the embeddings
    scaled(*batch("gpt"))[1].backward()


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
