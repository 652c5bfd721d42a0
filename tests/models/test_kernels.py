"""The fused CPU RMSNorm kernel against a float64 reference in elementary ops, and its fallbacks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models import kernels
from models.norms import RMSNorm

KERNEL_GRAD = "GeneratedBackwardFor_normlab_rms_norm"  # grad_fn of the registered op
needs_kernel = pytest.mark.skipif(
    not kernels.load_rms_norm_kernel(), reason="the fused RMSNorm kernel did not build here"
)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * w, in float64 and written out."""
    x, weight = x.double(), weight.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def grads(fn, x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor):
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    y = fn(x, weight)
    y.backward(grad.to(y.dtype))
    return y, x.grad, weight.grad


@needs_kernel
@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 256), (2, 3, 4, 33), (1, 1, 1)])
def test_fused_rms_norm_matches_the_formula_and_its_gradients(shape):
    torch.manual_seed(0)
    x, grad = torch.randn(shape) * 3, torch.randn(shape)
    weight = torch.randn(shape[-1])
    ours = grads(lambda x, w: kernels.rms_norm(x, w, 1e-5), x, weight, grad)
    ref = grads(lambda x, w: reference(x, w, 1e-5), x, weight, grad)
    assert ours[0].grad_fn.name().startswith(KERNEL_GRAD)  # the kernel ran, not the fallback
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b.float(), atol=2e-5, rtol=1e-4)


@needs_kernel
def test_fused_rms_norm_in_bfloat16_is_the_formula_to_bfloat16_precision():
    """bf16 autocast hands a norm bf16 input and its float32 weight: bf16 out and dx, float32 dw."""
    torch.manual_seed(0)
    x, grad = (torch.randn(6, 40) * 3).bfloat16(), torch.randn(6, 40).bfloat16()
    weight = torch.randn(40)
    y, dx, dw = grads(lambda x, w: kernels.rms_norm(x, w, 1e-5), x, weight, grad)
    assert (y.dtype, dx.dtype, dw.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32)
    assert y.grad_fn.name().startswith(KERNEL_GRAD)
    ref = grads(lambda x, w: reference(x, w, 1e-5), x.double(), weight.double(), grad)
    ulp = 2.0**-8  # bf16 keeps 8 significant bits: one rounding of the float32 result
    torch.testing.assert_close(y.double(), ref[0], rtol=ulp, atol=1e-6)
    torch.testing.assert_close(dx.double(), ref[1], rtol=ulp, atol=1e-6 + ulp * ref[1].abs().max())
    torch.testing.assert_close(dw.double(), ref[2], rtol=1e-5, atol=1e-5)


@needs_kernel
def test_fused_rms_norm_takes_strided_inputs_and_gradients():
    torch.manual_seed(0)
    x = torch.randn(4, 6, 8).transpose(0, 1)  # not contiguous
    grad = torch.randn(8, 4, 6).transpose(0, 2)  # (6, 4, 8), not contiguous
    weight = torch.randn(8)
    ours = grads(lambda x, w: kernels.rms_norm(x, w, 1e-6), x, weight, grad)
    ref = grads(lambda x, w: reference(x, w, 1e-6), x, weight, grad)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b.float(), atol=2e-5, rtol=1e-4)


@needs_kernel
def test_the_fake_kernels_give_the_real_outputs_strides_for_strided_inputs():
    """torch.compile plans memory from the fakes; a transposed per-head q or k (QK-norm) must get
    the contiguous output the C++ kernel writes, or inductor's stride checks fail."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 8).transpose(1, 2)  # (B, nh, T, hs) as split_heads makes it
    weight = torch.randn(8)
    y, rstd = torch.ops.normlab.rms_norm_forward(x, weight, 1e-5)
    dx, dw = torch.ops.normlab.rms_norm_backward(torch.randn_like(x), x, weight, rstd)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(weight)
        fy, frstd = torch.ops.normlab.rms_norm_forward(fx, fw, 1e-5)
        fdx, fdw = torch.ops.normlab.rms_norm_backward(fx, fx, fw, frstd)
    for real, fake in ((y, fy), (rstd, frstd), (dx, fdx), (dw, fdw)):
        assert (fake.shape, fake.stride(), fake.dtype) == (real.shape, real.stride(), real.dtype)


@needs_kernel
def test_rmsnorm_module_uses_the_kernel_for_float32_and_bfloat16_on_cpu_only():
    norm = RMSNorm(8)
    x = torch.randn(2, 8, requires_grad=True)
    assert norm(x).grad_fn.name().startswith(KERNEL_GRAD)
    assert norm(x.bfloat16()).grad_fn.name().startswith(KERNEL_GRAD)
    norm64 = RMSNorm(8).double()
    y = norm64(x.detach().double())
    torch.testing.assert_close(y, F.rms_norm(x.detach().double(), (8,), norm64.weight, 1e-5))


def test_a_failed_build_warns_once_and_falls_back(monkeypatch):
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.setattr(kernels, "SOURCE", kernels.SOURCE.with_name("missing.cpp"))
    monkeypatch.setenv("NORMLAB_FUSED_KERNELS", "1")
    with pytest.warns(UserWarning, match="fused CPU RMSNorm unavailable .*using F.rms_norm"):
        assert kernels.load_rms_norm_kernel() is False
    assert kernels.load_rms_norm_kernel() is False  # remembered: no second build, no warning
    x, w = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-5), reference(x, w, 1e-5).float())


def test_the_environment_switch_turns_the_kernel_off(monkeypatch):
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.setenv("NORMLAB_FUSED_KERNELS", "0")
    assert kernels.load_rms_norm_kernel() is False
    x = torch.randn(3, 8, requires_grad=True)
    assert not kernels.rms_norm(x, torch.ones(8), 1e-5).grad_fn.name().startswith(KERNEL_GRAD)
