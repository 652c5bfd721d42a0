"""Normalization layers and the NORMS registry (name -> constructor(dim, eps)).

Every norm maps a (..., dim) tensor to the same shape, normalizing over the last dimension.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, biased variance, via the fused kernel."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * gamma (Zhang & Sennrich 2019): no centring, no bias."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


NORMS: dict[str, Callable[[int, float], nn.Module]] = {
    "layernorm": LayerNorm,
    "rmsnorm": RMSNorm,
}


def build_norm(name: str, dim: int, eps: float = 1e-5) -> nn.Module:
    """Build the norm registered under `name` over a feature dimension of size `dim`."""
    if name not in NORMS:
        raise ValueError(f"unknown norm '{name}'; choose one of: {', '.join(sorted(NORMS))}")
    return NORMS[name](dim, eps)
