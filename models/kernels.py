"""A fused RMSNorm kernel for CPU training (models/csrc/rms_norm.cpp), built on first use.

torch's CPU F.rms_norm runs its backward as separate elementwise ops, about 3x slower than
LayerNorm's fused kernel (docs/benchmarks.md). The C++ kernel does the forward in one pass and
the backward in one pass plus a reduction for the weight gradient. It is compiled once with the
system's C++ compiler (a few seconds; torch caches it under ~/.cache/torch_extensions) and serves
float32 and bfloat16 CPU inputs with a float32 weight. Everything else, and every machine where
the build fails, uses F.rms_norm; NORMLAB_FUSED_KERNELS=0 turns the kernel off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

SOURCE = Path(__file__).with_name("csrc") / "rms_norm.cpp"
log = logging.getLogger(__name__)
_state: dict[str, bool] = {}  # "loaded": the ops are registered (False: the build failed)


# x86 vector extensions, widest first, as (name, compiler flags). The name goes into the
# extension's name, so a cache shared by machines with different CPUs keeps one build per ISA.
ISAS = (
    ("avx512", ["-mavx512f", "-mavx512vl", "-mavx2", "-mfma"]),
    ("avx2", ["-mavx2", "-mfma"]),
)


def cpu_isa() -> tuple[str, list[str]]:
    """The widest of ISAS this CPU reports in /proc/cpuinfo (Linux); ("base", []) otherwise."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "base", []
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    for name, isa_flags in ISAS:
        if all(f.removeprefix("-m") in flags for f in isa_flags):
            return name, isa_flags
    return "base", []


def add_pip_ninja_to_path() -> None:
    """torch runs `ninja` from PATH; the pip package's binary is not there outside a venv shell."""
    if shutil.which("ninja") is None:
        with contextlib.suppress(ImportError):
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def load_rms_norm_kernel() -> bool:
    """Build and register torch.ops.normlab.rms_norm_*; False when off or the build fails."""
    if "loaded" not in _state:
        _state["loaded"] = False
        if os.environ.get("NORMLAB_FUSED_KERNELS", "1") == "0":
            return False
        try:
            from torch.utils.cpp_extension import load

            add_pip_ninja_to_path()
            isa, isa_flags = cpu_isa()
            log.info("building the fused CPU RMSNorm kernel for %s (once per machine)", isa)
            flags = ["-O3", "-fopenmp-simd", *isa_flags]
            load(
                f"normlab_rms_norm_{isa}", [str(SOURCE)], extra_cflags=flags, is_python_module=False
            )
            register_autograd()
            _state["loaded"] = True
        except Exception as err:  # no compiler, no ninja, a read-only cache: fall back
            lines = str(err).strip().splitlines()
            warnings.warn(
                f"fused CPU RMSNorm unavailable ({type(err).__name__}: "
                f"{lines[0] if lines else ''}); using F.rms_norm. NORMLAB_FUSED_KERNELS=0 "
                "skips the build",
                stacklevel=2,
            )
    return _state["loaded"]


def kernel_used() -> bool | None:
    """Whether RMSNorm ran through the fused kernel in this process: True, False (off or its
    build failed: F.rms_norm), or None (no RMSNorm on the CPU asked for it)."""
    return _state.get("loaded")


def register_autograd() -> None:
    """Shapes for torch.compile's tracing, and the backward, of the C++ ops."""

    # The kernels write contiguous outputs whatever the input's strides (a per-head q or k is
    # a transposed view), and the fakes must say so: inductor checks the strides.
    @torch.library.register_fake("normlab::rms_norm_forward")
    def forward_fake(x: torch.Tensor, weight: torch.Tensor, eps: float):
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        return y, x.new_empty(x.numel() // x.shape[-1], dtype=torch.float32)

    @torch.library.register_fake("normlab::rms_norm_backward")
    def backward_fake(grad, x, weight, rstd):
        dx = torch.empty_like(x, memory_format=torch.contiguous_format)
        return dx, torch.empty_like(weight, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight, output[1])

    def backward(ctx, grad: torch.Tensor, _grad_rstd: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = torch.ops.normlab.rms_norm_backward(grad, x, weight, rstd)
        return dx, dw, None

    torch.library.register_autograd(
        "normlab::rms_norm_forward", backward, setup_context=setup_context
    )


@contextlib.contextmanager
def unfused():
    """F.rms_norm inside this block whatever the kernel's state: the kernel's backward has no
    derivative of its own, so second derivatives (Hessian-vector products) need the plain op."""
    loaded = _state.get("loaded")
    _state["loaded"] = False
    try:
        yield
    finally:
        if loaded is None:
            _state.pop("loaded", None)
        else:
            _state["loaded"] = loaded


KERNEL_DTYPES = (torch.float32, torch.bfloat16)  # the input's; the weight is float32


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm over the last dimension with a weight, fused on CPU for float32 or bfloat16
    input and a float32 weight (what bf16 autocast hands a norm), once load_rms_norm_kernel()
    has run (RMSNorm's constructor calls it, outside any compiled code)."""
    fits = x.device.type == "cpu" and x.dtype in KERNEL_DTYPES and weight.dtype == torch.float32
    if fits and x.numel() and _state.get("loaded"):
        return torch.ops.normlab.rms_norm_forward(x, weight, eps)[0]
    return F.rms_norm(x, weight.shape, weight, eps)
