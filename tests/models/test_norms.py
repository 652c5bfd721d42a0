"""Norms against torch's own ops, float64 formulas and hand-computed cases; the NORMS registry."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from model_helpers import (
    batch,
    gpt_config,
    randomize_norm_params,
    randomize_small_params,
    vit_config,
)
from torch import nn

from models.catalog import NORMS, per_token_norms
from models.config import NormConfig
from models.gpt import GPT
from models.norms import BatchNorm, DyT, GroupNorm, InstanceNorm, LayerNorm, RMSNorm, build_norm
from models.vit import ViT


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


def test_dyt_formula_and_alpha_option():
    norm = DyT(12, alpha=0.8)
    randomize_small_params(norm, seed=1)
    x = torch.randn(3, 5, 12) * 4
    expected = norm.weight * torch.tanh(norm.alpha * x) + norm.bias
    torch.testing.assert_close(norm(x), expected)
    model = GPT(gpt_config(norm=NormConfig(name="dyt", alpha=0.2), qk_norm=True))
    dyts = [m for m in model.modules() if isinstance(m, DyT)]
    assert len(dyts) == 2 * 2 * 2 + 1  # pre slots, q/k norms, final norm
    assert all(m.alpha.shape == (1,) and m.alpha.item() == pytest.approx(0.2) for m in dyts)
    with pytest.raises(ValueError, match=r"norm\.alpha must be > 0"):
        gpt_config(norm=NormConfig(name="dyt", alpha=0.0))


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
    with pytest.raises(ValueError, match=r"norm\.groups=5"):
        gpt_config(norm=NormConfig(name="groupnorm", groups=5))
    model = GPT(gpt_config(norm=NormConfig(name="groupnorm", groups=4)))
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
    model = ViT(vit_config(norm="batchnorm"))
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
    model = GPT(gpt_config(placement="post", norm="none"))
    assert sum(p.numel() for b in model.blocks for p in b.parameters() if p.ndim == 1) == (
        2 * (4 * 16 + 4 * 16 + 16)  # only Linear biases remain
    )


@pytest.mark.parametrize("norm", ["batchnorm", "instancenorm"])
def test_gpt_refuses_cross_token_norms(norm):
    with pytest.raises(ValueError, match="leaks future tokens.*layernorm.*model=vit"):
        GPT(gpt_config(norm=norm))
    ViT(vit_config(norm=norm))  # fine without a causal mask


def test_norm_registry_metadata_and_unknown_name():
    assert per_token_norms() == [
        "derf", "dyt", "groupnorm", "layernorm", "none", "rmsnorm", "seednorm"
    ]  # fmt: skip
    assert NORMS["batchnorm"].mixes == {"batch", "sequence"}
    assert NORMS["instancenorm"].mixes == {"sequence"}
    with pytest.raises(ValueError, match="batchnorm.*derf.*dyt.*groupnorm.*instancenorm.*none"):
        gpt_config(norm="weightnorm")


def test_seednorm_formula_by_hand_and_rmsnorm_at_init():
    """Cai et al. 2025, Eq. 1 in float64: (tanh(x . beta) alpha + gamma) * x / RMS(x)."""
    from models.norms import SeeDNorm

    torch.manual_seed(0)
    norm = SeeDNorm(16).double()
    x = 3 * torch.randn(4, 5, 16, dtype=torch.float64)
    torch.testing.assert_close(norm(x), F.rms_norm(x, (16,), eps=1e-5))  # beta = 0: RMSNorm
    with torch.no_grad():
        for p in (norm.weight, norm.alpha, norm.beta):
            p.copy_(torch.randn(16, dtype=torch.float64))
    rms = x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()
    by_hand = (torch.tanh((x * norm.beta).sum(-1, keepdim=True)) * norm.alpha + norm.weight) * (
        x / rms
    )
    torch.testing.assert_close(norm(x), by_hand)
    # the input's norm reaches the output, as RMSNorm's does not: 2x changes x . beta
    assert not torch.allclose(norm(2 * x), norm(x))
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
        low = SeeDNorm(16).to(dtype)
        low.load_state_dict({k: v.to(dtype) for k, v in norm.state_dict().items()})
        err = (low(x.to(dtype)).double() - norm(x)).abs().max() / by_hand.abs().max()
        assert err < tol, (dtype, err)


def test_seednorm_trains_in_gpt_and_vit_with_its_own_qk_norm():
    from models.norms import SeeDNorm

    model = GPT(gpt_config(norm="seednorm", qk_norm=True))
    assert sum(isinstance(m, SeeDNorm) for m in model.modules()) == 2 * 2 * 2 + 1
    idx = torch.randint(0, model.cfg.vocab_size, (2, 8))
    _, loss = model(idx, idx)
    loss.backward()
    assert torch.isfinite(loss) and all(
        p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters()
    )
    images, labels = batch("vit")
    _, loss = ViT(vit_config(norm="seednorm"))(images, labels)
    assert torch.isfinite(loss)


def test_dyt_alpha_attn_sets_the_attention_input_norm_only():
    """Zhu et al. 2025's LLaMA setting: one init of a before attention, another elsewhere."""
    model = GPT(gpt_config(norm=NormConfig(name="dyt", alpha=0.2, alpha_attn=0.8)))
    for block in model.blocks:
        assert block.attn_pre.alpha.item() == pytest.approx(0.8)
        assert block.mlp_pre.alpha.item() == pytest.approx(0.2)
    assert model.final_norm.alpha.item() == pytest.approx(0.2)
    # Post-LN has no norm in front of the attention: the setting would do nothing, so it is refused
    with pytest.raises(ValueError, match="placement=post has none there"):
        gpt_config(norm=NormConfig(name="dyt", alpha=0.2, alpha_attn=0.8), placement="post")
    with pytest.raises(ValueError, match=r"norm\.alpha_attn must be > 0"):  # its own key named
        gpt_config(norm=NormConfig(name="dyt", alpha_attn=-1.0))
