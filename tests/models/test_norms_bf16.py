"""Norms in bf16 against float64 references of their formulas: DyT's scale takes part in type
promotion (the paper's shape-(1,) a), GroupNorm's statistics and backward run in fp32 as
F.group_norm's do, and GroupNorm returns the input's dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.norms import DyT, GroupNorm


def test_dyt_under_bf16_autocast_computes_its_tanh_in_fp32():
    torch.manual_seed(0)
    norm = DyT(64, alpha=0.73)
    x = (3 * torch.randn(8, 64)).bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = norm(x)
    y.float().sum().backward()
    x64, a64 = x.detach().double().requires_grad_(), norm.alpha.detach().double().requires_grad_()
    ref = torch.tanh(a64 * x64) * norm.weight.double() + norm.bias.double()
    ref.sum().backward()
    assert (y.double() - ref).abs().max() < 1e-5  # a bf16 tanh: ~4e-3
    assert (norm.alpha.grad.double() - a64.grad).abs().max() / a64.grad.abs() < 1e-5
    assert norm.alpha.shape == (1,)


def test_groupnorm_in_bf16_matches_f_group_norm_and_keeps_the_dtype():
    torch.manual_seed(0)
    for groups in (1, 8):
        norm = GroupNorm(64, groups=groups)
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
        x = (2 + 3 * torch.randn(16, 64)).bfloat16().requires_grad_()
        grad = torch.randn(16, 64).bfloat16()
        y = norm(x)
        (dx,) = torch.autograd.grad(y, x, grad)
        x64 = x.detach().double().requires_grad_()
        w, b = norm.weight.detach().double(), norm.bias.detach().double()
        ref = F.group_norm(x64, groups, w, b, norm.eps)
        (dx64,) = torch.autograd.grad(ref, x64, grad.double())
        assert y.dtype == torch.bfloat16
        assert (y.double() - ref).abs().max() < 0.05  # one bf16 rounding of values up to ~3
        assert (dx.double() - dx64).abs().max() < 0.02, groups  # bf16 throughout: 3.7e-2, 2.8e-1
