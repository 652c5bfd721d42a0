"""Attention, MLP and the one residual Block shared by every placement."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.norms import build_norm
from models.placement import Placement


class Attention(nn.Module):
    """Multi-head self-attention with separate q, k, v and output projections.

    Goes through F.scaled_dot_product_attention so a GPU uses the flash / memory-efficient kernels.
    """

    def __init__(
        self, n_embd: int, n_head: int, causal: bool, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(
                f"n_embd={n_embd} is not divisible by n_head={n_head}; "
                "pick model.n_embd as a multiple of model.n_head"
            )
        self.n_head = n_head
        self.causal = causal
        self.dropout = dropout
        self.q_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.k_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.v_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.out_proj = nn.Linear(n_embd, n_embd, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def qk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head queries and keys exactly as they enter the dot product (probes read these)."""
        q = self.split_heads(self.q_proj(x))  # (B, nh, T, hs)
        k = self.split_heads(self.k_proj(x))  # (B, nh, T, hs)
        return q, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k = self.qk(x)  # (B, nh, T, hs) each
        v = self.split_heads(self.v_proj(x))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.out_proj(y)


class MLP(nn.Module):
    """fc1 -> GELU -> fc2, hidden width mlp_ratio * n_embd."""

    def __init__(
        self, n_embd: int, mlp_ratio: int = 4, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_embd, mlp_ratio * n_embd, bias=bias)
        self.fc2 = nn.Linear(mlp_ratio * n_embd, n_embd, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(F.gelu(self.fc1(x))))


class Block(nn.Module):
    """One Transformer layer: an attention and an MLP residual sub-layer, each computing

        y = Post( alpha * x + BranchOut( F( Pre(x) ) ) )

    Post-LN (Pre, BranchOut = I; alpha = 1):    y = LN(x + F(x))
    Pre-LN  (BranchOut, Post = I; alpha = 1):   y = x + F(LN(x))
    DeepNorm (as Post-LN, alpha = (2N)^(1/4)):  y = LN(alpha * x + F(x))

    A slot without a norm holds nn.Identity(), so forward has no placement branches.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        placement: Placement,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        alpha: float = 1.0,
        causal: bool = True,
        dropout: float = 0.0,
        bias: bool = True,
        mlp_ratio: int = 4,
    ) -> None:
        super().__init__()
        self.alpha = alpha
        self.attn = Attention(n_embd, n_head, causal=causal, dropout=dropout, bias=bias)
        self.mlp = MLP(n_embd, mlp_ratio=mlp_ratio, dropout=dropout, bias=bias)
        self.attn_drop = nn.Dropout(dropout)

        def slot(has_norm: bool) -> nn.Module:
            return build_norm(norm, n_embd, norm_eps) if has_norm else nn.Identity()

        self.attn_pre, self.attn_branch_out, self.attn_post = (
            slot(placement.pre),
            slot(placement.branch_out),
            slot(placement.post),
        )
        self.mlp_pre, self.mlp_branch_out, self.mlp_post = (
            slot(placement.pre),
            slot(placement.branch_out),
            slot(placement.post),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn_drop(self.attn(self.attn_pre(x)))
        x = self.attn_post(self.alpha * x + self.attn_branch_out(h))
        h = self.mlp(self.mlp_pre(x))
        x = self.mlp_post(self.alpha * x + self.mlp_branch_out(h))
        return x

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4g}"
