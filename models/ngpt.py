"""nGPT's normalized block (Loshchilov et al. 2024): hidden states and weights on the unit sphere.

Each layer moves the hidden state h (unit norm) toward the normalized output of each sub-layer,

    h <- Norm( h + |alpha_A| * (Norm(Attn(h)) - h) )
    h <- Norm( h + |alpha_M| * (Norm(MLP(h))  - h) )

Norm(x) = x / ||x|| over the features, alpha_A and alpha_M learnable per feature (init 0.05).
Attention normalizes each head's q and k and scales them by s_qk (init 1): its logits are
(s_qk q/||q||) . (s_qk k/||k||) * sqrt(d_head), the inverse of the usual temperature, since
unit vectors' dot products lie in [-1, 1]. The MLP's hidden units are scaled by s_u * sqrt(d)
(init s_u = 1) before the activation, as the paper scales the MLP's inputs to its nonlinearity;
the model's logits are scaled by s_z (init 1). No LayerNorm or RMSNorm anywhere.

The block is its own module, not a Placement of layers.Block: its update is an interpolation
between two unit vectors followed by a norm, which no choice of the Block's three norm slots and
residual weight expresses. It reuses Attention and MLP; what it adds is in this file. Every
weight matrix and embedding is renormalized along the model dimension at init and after every
optimizer step (Stack.normalize_weights; the harness calls it after each step).

Each learnable scale s is stored as a parameter p initialized to `scale` and read as
s = p * (init / scale), the paper's way of giving these vectors a larger effective step size
under Adam than the matrices get (scale 1/sqrt(d) for alpha, s_qk and s_z; 1 for s_u).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.config import BlockConfig
from models.layers import MLP, Attention
from models.placement import Placement

ALPHA_INIT = 0.05  # the paper's alpha_A, alpha_M init, "of order 1 / n_layer"


def unit(x: torch.Tensor) -> torch.Tensor:
    """x / ||x|| over the last dimension."""
    return F.normalize(x, dim=-1)


class ScaledVector(nn.Module):
    """A learnable vector read as s = p * (init / scale), p stored starting at `scale`."""

    def __init__(self, size: int, init: float, scale: float) -> None:
        super().__init__()
        self.init, self.scale = init, scale
        self.weight = nn.Parameter(torch.full((size,), float(scale)))

    def forward(self) -> torch.Tensor:
        return self.weight * (self.init / self.scale)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, init={self.init:g}, scale={self.scale:.4g}"


class UnitHeads(nn.Module):
    """s_qk * x / ||x|| per head on (B, nh, T, hs); s_qk has one entry per model feature."""

    def __init__(self, n_head: int, head_size: int, scale: float) -> None:
        super().__init__()
        self.shape = (n_head, 1, head_size)
        self.s_qk = ScaledVector(n_head * head_size, 1.0, scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.s_qk().view(self.shape) * unit(x)  # (B, nh, T, hs)


class HiddenScale(nn.Module):
    """The MLP's hidden units times s_u * sqrt(d_model)."""

    def __init__(self, hidden: int, n_embd: int) -> None:
        super().__init__()
        self.sqrt_d = math.sqrt(n_embd)
        self.s_u = ScaledVector(hidden, 1.0, 1.0)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return u * (self.s_u() * self.sqrt_d)


class LogitScale(nn.Module):
    """The logits times s_z, one entry per output (vocabulary entry or class)."""

    def __init__(self, n_out: int, n_embd: int) -> None:
        super().__init__()
        self.s_z = ScaledVector(n_out, 1.0, n_embd**-0.5)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.s_z()


class NormalizedBlock(nn.Module):
    """One nGPT layer (module docstring); `.attn` and `.mlp` as in layers.Block."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        d, head_size = cfg.n_embd, cfg.n_embd // cfg.n_head
        scale = d**-0.5
        self.attn = Attention(
            d, cfg.n_head, cfg.causal, cfg.dropout, cfg.bias, softmax_scale=math.sqrt(head_size),
            rope=cfg.pos == "rope", softcap=cfg.attn_softcap, gate=cfg.attn_gate,
        )  # fmt: skip
        self.attn.q_norm = self.attn.k_norm = UnitHeads(cfg.n_head, head_size, scale)  # shared
        self.mlp = MLP(d, cfg.mlp_ratio, cfg.dropout, cfg.bias, cfg.activation)
        self.mlp.hidden_scale = HiddenScale(cfg.mlp_ratio * d, d)
        self.attn_alpha = ScaledVector(d, ALPHA_INIT, scale)
        self.mlp_alpha = ScaledVector(d, ALPHA_INIT, scale)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = unit(h)  # the embeddings' sum is not unit; later blocks' inputs already are
        h = unit(h + self.attn_alpha().abs() * (unit(self.attn(h)) - h))
        return unit(h + self.mlp_alpha().abs() * (unit(self.mlp(h)) - h))

    def sphere_weights(self) -> list[tuple[torch.Tensor, int]]:
        """(weight, dim) pairs normalized along the model dimension: the input projections'
        rows (dim 1 of out x in), the output projections' columns (dim 0)."""
        a, m = self.attn, self.mlp
        inputs = [a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, m.fc1.weight]
        return [(w, 1) for w in inputs] + [(a.out_proj.weight, 0), (m.fc2.weight, 0)]


def build_blocks(cfg: BlockConfig, placement: Placement, alpha: float) -> nn.ModuleList:
    """The n_layer NormalizedBlocks (the placement record and alpha have nothing to add)."""
    return nn.ModuleList(NormalizedBlock(cfg) for _ in range(cfg.n_layer))
