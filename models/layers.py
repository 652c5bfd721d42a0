"""Attention, MLP and the one residual Block shared by every placement."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from models.norms import build_norm, get_norm
from models.placement import Placement, layer_placements

if TYPE_CHECKING:  # config.py imports this module for its checks
    from models.config import BlockConfig

NormFactory = Callable[[int], nn.Module]  # feature size -> norm module

# The MLP's elementwise activation, by name (config key model.activation).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,  # exact, erf-based (Hendrycks & Gimpel 2016)
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's tanh approximation, fused
    "relu": F.relu,  # the original Transformer's (Vaswani et al. 2017)
}


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation '{name}'; choose model.activation from: {', '.join(ACTIVATIONS)}"
        )
    return ACTIVATIONS[name]


class Attention(nn.Module):
    """Multi-head self-attention with separate q, k, v and output projections.

    Goes through F.scaled_dot_product_attention so a GPU uses the flash / memory-efficient kernels.
    With `qk_norm` (a norm factory; Wortsman et al. 2023) each head's queries and keys are
    normalized over the head dimension before the dot product; q_norm and k_norm are
    identities otherwise.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        causal: bool,
        dropout: float = 0.0,
        bias: bool = True,
        qk_norm: NormFactory | None = None,
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
        head_size = n_embd // n_head
        self.q_norm = qk_norm(head_size) if qk_norm else nn.Identity()
        self.k_norm = qk_norm(head_size) if qk_norm else nn.Identity()

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head queries, keys and values exactly as they enter the dot product.

        One matmul with the three weights stacked: under autocast x is cast once, not three
        times. The three Linears stay separate modules for init, probes and weight norm.
        """
        C = x.shape[-1]
        p = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([m.weight for m in p])  # (3C, C)
        bias = torch.cat([m.bias for m in p]) if self.q_proj.bias is not None else None
        q, k, v = F.linear(x, weight, bias).split(C, dim=-1)  # (B, T, C) each
        q = self.q_norm(self.split_heads(q))  # (B, nh, T, hs)
        k = self.k_norm(self.split_heads(k))
        return q, k, self.split_heads(v)

    def qk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head queries and keys as they enter the dot product (probes read these)."""
        q, k, _ = self.qkv(x)
        return q, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x)  # (B, nh, T, hs) each
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.out_proj(y)


class MLP(nn.Module):
    """fc1 -> activation (ACTIVATIONS) -> fc2, hidden width mlp_ratio * n_embd."""

    def __init__(
        self,
        n_embd: int,
        mlp_ratio: int = 4,
        dropout: float = 0.0,
        bias: bool = True,
        activation: str = "gelu",
    ) -> None:
        super().__init__()
        self.activation = activation
        self.act = get_activation(activation)
        self.fc1 = nn.Linear(n_embd, mlp_ratio * n_embd, bias=bias)
        self.fc2 = nn.Linear(mlp_ratio * n_embd, n_embd, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


class Gate(nn.Module):
    """ReZero's residual weight (Bachlechner et al. 2020): y = a * x, a one scalar, init 0."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x


class NoSkip(nn.Module):
    """No skip from the block input: the MLP branch passes through untouched."""

    def forward(self, h: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        return h


class InputSkip(nn.Module):
    """B2T's extra skip (Takase et al. 2023): adds s * x0, the block input, to the MLP branch."""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, h: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        return torch.add(h, x0, alpha=self.weight)


# Slot kind (placement.SLOT_KINDS) -> module, given the model's norm factory and the feature size.
SLOTS: dict[str, Callable[[NormFactory, int], nn.Module]] = {
    "none": lambda make_norm, dim: nn.Identity(),
    "norm": lambda make_norm, dim: make_norm(dim),
    "gate": lambda make_norm, dim: Gate(),
}


class Block(nn.Module):
    """One Transformer layer with input x0: an attention and an MLP residual sub-layer,

        h = Post( alpha * x0 + BranchOut( Attn( Pre(x0) ) ) )
        y = Post( alpha * h  + BranchOut( MLP( Pre(h) ) ) + s * x0 )

    Post-LN  (Post = LN):                      y = LN(x + F(x))
    Pre-LN   (Pre = LN):                       y = x + F(LN(x))
    DeepNorm (as Post-LN, alpha = (2N)^(1/4)): y = LN(alpha * x + F(x))
    Sandwich (Pre = BranchOut = LN):           y = x + LN(F(LN(x)))
    ReZero   (BranchOut = gate a, init 0):     y = x + a * F(x)
    B2T      (as Post-LN, s = 1):              h = LN(x0 + Attn(x0)); y = LN(x0 + h + MLP(h))
    Mix-LN: the model gives its first layers Post-LN records and the rest Pre-LN records.

    A slot holds nn.Identity(), a norm or a Gate, and s is 0 but for B2T, so forward has no
    placement branches. Norm options (`norm_opts`: alpha for dyt, groups for groupnorm) reach
    every norm; `qk_norm` adds the per-head q/k norm named by the norm's registry entry.
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
        norm_opts: Mapping[str, float] | None = None,
        qk_norm: bool = False,
        activation: str = "gelu",
    ) -> None:
        super().__init__()
        if placement.layers is not None:
            raise ValueError(
                f"placement={placement.name} differs by layer; build each Block from "
                "models.placement.layer_placements(...)"
            )
        opts = dict(norm_opts or {})

        def make_norm(dim: int) -> nn.Module:
            return build_norm(norm, dim, norm_eps, **opts)

        def make_qk_norm(dim: int) -> nn.Module:
            return build_norm(get_norm(norm).qk, dim, norm_eps, **opts)

        self.placement_name = placement.name  # per layer: Mix-LN's blocks say post or pre
        self.alpha = alpha
        self.input_skip = placement.input_skip
        self.mlp_skip = InputSkip(self.input_skip) if self.input_skip else NoSkip()
        self.attn = Attention(
            n_embd,
            n_head,
            causal=causal,
            dropout=dropout,
            bias=bias,
            qk_norm=make_qk_norm if qk_norm else None,
        )
        self.mlp = MLP(
            n_embd, mlp_ratio=mlp_ratio, dropout=dropout, bias=bias, activation=activation
        )
        self.attn_drop = nn.Dropout(dropout)
        self.attn_pre, self.attn_branch_out, self.attn_post = (
            SLOTS[kind](make_norm, n_embd) for kind in placement.slots
        )
        self.mlp_pre, self.mlp_branch_out, self.mlp_post = (
            SLOTS[kind](make_norm, n_embd) for kind in placement.slots
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x0 = x
        # torch.add(branch, x, alpha=a) is branch + a * x; autograd skips the multiply at a = 1.
        h = self.attn_drop(self.attn(self.attn_pre(x)))
        x = self.attn_post(torch.add(self.attn_branch_out(h), x, alpha=self.alpha))
        h = self.mlp_skip(self.mlp_branch_out(self.mlp(self.mlp_pre(x))), x0)
        x = self.mlp_post(torch.add(h, x, alpha=self.alpha))
        return x

    def extra_repr(self) -> str:
        return f"{self.placement_name}, alpha={self.alpha:.4g}, input_skip={self.input_skip:g}"


def build_blocks(
    cfg: BlockConfig, placement: Placement, alpha: float, causal: bool
) -> nn.ModuleList:
    """The n_layer Blocks of a model's config."""
    return nn.ModuleList(
        Block(
            cfg.n_embd,
            cfg.n_head,
            layer_placement,
            norm=cfg.norm,
            norm_eps=cfg.norm_eps,
            alpha=alpha,
            causal=causal,
            dropout=cfg.dropout,
            bias=cfg.bias,
            mlp_ratio=cfg.mlp_ratio,
            norm_opts=cfg.norm_opts,
            qk_norm=cfg.qk_norm,
            activation=cfg.activation,
        )
        for layer_placement in layer_placements(placement, cfg.n_layer, cfg.mix_fraction)
    )
