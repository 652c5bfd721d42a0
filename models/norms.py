"""Normalization layers, built by name through the NORMS registry (models/catalog.py, torch-free:
name -> NormSpec, called as spec(dim, eps, **opts)); ``build_norm`` builds one by name.

Every norm maps a (..., dim) tensor to the same shape and normalizes features. Most take their
statistics from one token's features alone; BatchNorm and InstanceNorm also take them across the
batch and/or the sequence, which each registry entry records in `mixes`, so a causal model can
refuse them (their statistics would carry future tokens into the present).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.catalog import (
    get_norm,
    groups_divide,
    positive_alpha,
)
from models.kernels import load_rms_norm_kernel, rms_norm


class AffineNorm(nn.Module):
    """A norm with eps, a per-feature gain gamma (init 1) and shift beta (init 0)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class LayerNorm(AffineNorm):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, biased variance, via the fused kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * gamma (Zhang & Sennrich 2019): no centring, no bias.

    float32 and bfloat16 CPU inputs go through normlab's fused kernel (models/kernels.py), others
    through F.rms_norm.
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        load_rms_norm_kernel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025): y = gamma * tanh(a * x) + beta, a one learnable scalar.

    Takes no statistics at all; eps is accepted for a uniform constructor and unused. ``a`` has
    shape (1,), as in the paper's code: a 0-dim tensor does not take part in type promotion, so
    under bf16 autocast ``a * x`` and the tanh would run in bf16.
    """

    def __init__(self, dim: int, eps: float = 1e-5, alpha: float = 0.5) -> None:
        super().__init__()
        positive_alpha(dim, alpha)
        self.alpha = nn.Parameter(torch.full((1,), float(alpha)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha={self.alpha.item():.4g}"


class Derf(nn.Module):
    """Dynamic erf (Chen et al. 2025, "Stronger Normalization-Free Transformers"):
    y = gamma * erf(a * x + s) + beta, a and s learnable scalars, gamma and beta per feature.

    As the authors' code (github.com/zlab-princeton/Derf): ``a`` and ``s`` of shape (1,), ``a``
    from ``alpha`` (their module's default 0.5; their language-model setting 1.0), ``s`` from 0.
    Takes no statistics; eps is accepted for a uniform constructor and unused.
    """

    def __init__(self, dim: int, eps: float = 1e-5, alpha: float = 0.5) -> None:
        super().__init__()
        positive_alpha(dim, alpha)
        self.alpha = nn.Parameter(torch.full((1,), float(alpha)))
        self.shift = nn.Parameter(torch.zeros(1))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(self.alpha * x + self.shift) * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha={self.alpha.item():.4g}"


class SeeDNorm(nn.Module):
    """Self-rescaled dynamic normalization (Cai et al. 2025, arXiv 2510.22777, Eq. 1):
    y = (tanh(x . beta) * alpha + gamma) * x / RMS(x), RMS(x) = sqrt(mean(x^2) + eps).

    beta, alpha and gamma are per-feature vectors; x . beta is one scalar per token, so the gain
    depends on the input and the input's norm reaches the output. beta starts at 0, so at
    initialization SeeDNorm is RMSNorm (gamma 1); alpha starts at 1. The paper's multi-head
    variant (x . beta per group of features) is not built.
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # gamma
        self.alpha = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.tanh(x @ self.beta.to(x.dtype)).unsqueeze(-1) * self.alpha + self.weight
        return F.rms_norm(x, (x.shape[-1],), eps=self.eps) * scale

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class GroupNorm(nn.Module):
    """GroupNorm (Wu & He 2018) over one token's features: the dim features split into `groups`
    contiguous groups, each normalized by its own mean and biased variance, then a per-feature
    gamma and beta. One group is LayerNorm; dim groups leave nothing but beta."""

    def __init__(self, dim: int, eps: float = 1e-5, groups: int = 8) -> None:
        super().__init__()
        groups_divide(dim, groups)
        self.eps, self.groups = eps, groups
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Each group is a LayerNorm over its own features: the fused layer_norm kernel on a
        # (..., groups, dim / groups) view is several times faster than F.group_norm on CPU.
        # In fp32, as F.group_norm computes a bf16 input's statistics: without a weight, torch's
        # CPU layer_norm would run a bf16 input's backward in bf16 throughout.
        y = F.layer_norm(
            x.float().unflatten(-1, (self.groups, -1)), (x.shape[-1] // self.groups,), eps=self.eps
        )
        return torch.addcmul(self.bias, y.flatten(-2), self.weight).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, groups={self.groups}, eps={self.eps}"


class BatchNorm(nn.Module):
    """BatchNorm (Ioffe & Szegedy 2015) per feature over every (sample, token) position.

    Training uses the batch's statistics and updates running ones; eval uses the running ones,
    so in eval a sample's output does not depend on the rest of its batch.
    """

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(
            x.reshape(-1, x.shape[-1]),  # (B*T, C)
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            training=self.training,
            momentum=self.momentum,
            eps=self.eps,
        )
        return y.view(x.shape)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, momentum={self.momentum}"


class InstanceNorm(AffineNorm):
    """InstanceNorm (Ulyanov et al. 2016) per sample and feature over the tokens: input (..., T, C),
    statistics over T, biased variance, per-feature gamma and beta. No running statistics."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T, C = x.shape[-2:]
        seq = x.reshape(-1, T, C).transpose(1, 2)  # (N, C, T)
        y = F.instance_norm(seq, weight=self.weight, bias=self.bias, eps=self.eps)
        return y.transpose(1, 2).reshape(x.shape)


def no_norm(dim: int, eps: float = 1e-5) -> nn.Module:
    return nn.Identity()


def build_norm(name: str, dim: int, eps: float = 1e-5, **opts: float) -> nn.Module:
    """Build the norm registered under `name` over a feature dimension of size `dim`.

    `opts` (alpha for dyt, groups for groupnorm) go to the norms that take them.
    """
    return get_norm(name)(dim, eps, **opts)
