"""A simulated low-precision forward (``model.sim_dtype``): outputs rounded to a narrower format
on the way, gradients as if unrounded."""

from __future__ import annotations

import torch
from torch import nn

SIM_FORMATS = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8_e4m3": getattr(torch, "float8_e4m3fn", None),
    "fp8_e5m2": getattr(torch, "float8_e5m2", None),
}


def rounded(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x as the format ``dtype`` holds it (beyond its range: inf, or NaN for fp8 e4m3, as torch
    casts), with the gradient of the identity (straight-through)."""
    return x + (x.to(dtype).to(x.dtype) - x).detach()


def simulate_precision(blocks: nn.ModuleList, name: str) -> None:
    """Round the output of every block in ``blocks`` and of every nn.Linear inside them (the
    attention's output projection, fc1, fc2; q, k and v run as one stacked matmul and are not
    rounded) to the format ``name`` (SIM_FORMATS) on each forward, by hooks. Norm statistics,
    the attention softmax and the optimizer stay in float32."""
    dtype = SIM_FORMATS[name]
    if dtype is None:
        raise ValueError(f"model.sim_dtype={name}: this torch has no such dtype; pick bf16 or fp16")
    linears = [m for m in blocks.modules() if isinstance(m, nn.Linear)]
    for module in [*blocks, *linears]:
        module.register_forward_hook(lambda m, args, out: rounded(out, dtype))
