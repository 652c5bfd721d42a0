"""Derf (Chen et al. 2025): gamma * erf(a x + s) + beta against x-transformers' Derf at identical
weights, its fp32 and bf16 outputs and gradients against float64, and its options from the
command line's config."""

from __future__ import annotations

import pytest
import torch
from x_transformers.x_transformers import Derf as ReferenceDerf

from models.config import NormConfig
from models.gpt import GPT
from models.norms import Derf
from tests.models.model_helpers import gpt_config


def paired(dim: int = 24, alpha: float = 0.7) -> tuple[Derf, ReferenceDerf]:
    """Ours and the reference with the same non-trivial weights."""
    torch.manual_seed(0)
    ours, ref = Derf(dim, alpha=alpha), ReferenceDerf(dim, init_alpha=alpha)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.uniform_(-0.5, 0.5)
        ours.shift.fill_(0.3)
        ref.gamma.copy_(ours.weight)
        ref.beta.copy_(ours.bias)
        ref.s.fill_(0.3)
        ref.alpha.fill_(alpha)
    return ours, ref


def test_derf_equals_the_reference_at_identical_weights() -> None:
    ours, ref = paired()
    x = 3 * torch.randn(4, 7, 24)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=0)
    # and the paper's formula written out
    expected = ours.weight * torch.erf(ours.alpha * x + ours.shift) + ours.bias
    torch.testing.assert_close(ours(x), expected)
    assert ours.alpha.shape == ours.shift.shape == (1,)  # as the authors' code


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-5)])
def test_derf_against_float64(dtype: torch.dtype, tol: float) -> None:
    """fp32 directly, bf16 under autocast: a and s of shape (1,) take part in type promotion,
    so the erf runs in fp32 either way; outputs and a's gradient within ``tol`` of float64."""
    ours, _ = paired(64)
    x = (3 * torch.randn(8, 64)).to(dtype).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        y = ours(x)
    y.float().sum().backward()
    x64 = x.detach().double()
    a64 = ours.alpha.detach().double().requires_grad_()
    ref = torch.erf(a64 * x64 + ours.shift.double()) * ours.weight.double() + ours.bias.double()
    ref.sum().backward()
    assert (y.double() - ref).abs().max() < tol
    assert (ours.alpha.grad.double() - a64.grad).abs().max() / a64.grad.abs() < tol


def test_derf_builds_in_the_gpt_with_its_alpha_and_refuses_a_bad_one() -> None:
    model = GPT(gpt_config(norm=NormConfig(name="derf", alpha=1.0), qk_norm=True))
    derfs = [m for m in model.modules() if isinstance(m, Derf)]
    assert len(derfs) == 2 * 2 * 2 + 1  # pre slots, q/k norms, final norm
    assert all(m.alpha.item() == 1.0 and m.shift.item() == 0.0 for m in derfs)
    with pytest.raises(ValueError, match=r"norm\.alpha must be > 0"):
        gpt_config(norm=NormConfig(name="derf", alpha=-1.0))
