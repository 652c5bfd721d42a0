"""Attention, MLP and the one residual Block shared by every placement."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from models.activations import get_activation
from models.catalog import get_connection, get_norm
from models.config import BlockConfig
from models.connections import HyperConnection
from models.placement import Placement, layer_placements

NormFactory = Callable[[int], nn.Module]  # feature size -> norm module
ROPE_BASE = 10000.0


def rotate(x: torch.Tensor, base: float = ROPE_BASE) -> torch.Tensor:
    """Rotary positions (RoFormer, Su et al. 2021) on (B, nh, T, hs): each pair of features
    (x_2i, x_2i+1) at position m turned by the angle m * base^(-2i/hs), so q.k depends on the
    positions only through their difference."""
    T, hs = x.shape[-2], x.shape[-1]
    freq = base ** (-torch.arange(0, hs, 2, device=x.device, dtype=torch.float32) / hs)
    angle = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * freq  # (T, hs/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """c * tanh(x / c): x bounded to (-c, c), near the identity well inside it (Gemma 2's
    soft-capping); ``cap`` None: x unchanged."""
    return x if cap is None else cap * torch.tanh(x / cap)


class Attention(nn.Module):
    """Multi-head self-attention with separate q, k, v and output projections.

    Goes through F.scaled_dot_product_attention so a GPU uses the flash / memory-efficient kernels.
    With `qk_norm` (a norm factory; Wortsman et al. 2023) each head's queries and keys are
    normalized over the head dimension before the dot product (with `qk_full_width`, q and k over
    the whole width before the head split, as OLMo 2 does), with `v_norm` its values too. With
    `rope`, each head's q and k are rotated (``rotate``): after a full-width norm, before a
    per-head one (a unit norm, nGPT's, commutes with the rotation; its per-feature scale does not)
    (HybridNorm's QKV-norm); q_norm, k_norm and v_norm are identities otherwise. The logits are
    q.k * scale, scale = `softmax_scale` or 1 / sqrt(head size). With `gate` (Qiu et al. 2025)
    the heads' output is multiplied by sigmoid(x W_g) before the output projection, x the
    attention's input: one gate per head ("headwise") or per feature ("elementwise"). With
    `softcap` each logit is
    soft-capped (``softcap``) before the mask and the softmax, in an explicit attention (sdpa has
    no hook between the logits and the softmax).
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        causal: bool,
        dropout: float = 0.0,
        bias: bool = True,
        qk_norm: NormFactory | None = None,
        v_norm: NormFactory | None = None,
        softmax_scale: float | None = None,
        qk_full_width: bool = False,
        rope: bool = False,
        softcap: float | None = None,
        gate: str | None = None,
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
        self.qk_full_width = qk_full_width  # q and k normalized before the head split (OLMo 2)
        self.rope = rope  # rotary positions on each head's q and k
        qk_size = n_embd if qk_full_width else head_size
        self.q_norm = qk_norm(qk_size) if qk_norm else nn.Identity()
        self.k_norm = qk_norm(qk_size) if qk_norm else nn.Identity()
        self.v_norm = v_norm(head_size) if v_norm else nn.Identity()
        self.softmax_scale = softmax_scale  # None: sdpa's own 1 / sqrt(head_size)
        self.scale = head_size**-0.5 if softmax_scale is None else softmax_scale
        self.softcap = softcap
        # gated attention: sigmoid(x W_g) per head or per feature, times the heads' output
        self.gate = gate
        self.gate_proj = (
            nn.Linear(n_embd, n_head if gate == "headwise" else n_embd, bias=False)
            if gate
            else None
        )

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head queries, keys and values exactly as they enter the dot product.

        One matmul with the three weights stacked (under autocast x is cast once, not three
        times). The stack is a copy each forward; keeping q, k and v in one shared tensor
        instead measured no faster (forward + backward time, copy / shared: 0.97 at L2 d128,
        0.99 at L6 d256, 2 CPU threads).
        """
        C = x.shape[-1]
        p = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([m.weight for m in p])  # (3C, C)
        bias = torch.cat([m.bias for m in p]) if self.q_proj.bias is not None else None
        q, k, v = F.linear(x, weight, bias).split(C, dim=-1)  # (B, T, C) each
        if self.qk_full_width:  # over C, then into heads (and rotated: OLMo 2's order)
            q, k = self.split_heads(self.q_norm(q)), self.split_heads(self.k_norm(k))
            if self.rope:
                q, k = rotate(q), rotate(k)
        else:  # into heads (rotated first: nGPT's order), then each head over its hs
            q, k = self.split_heads(q), self.split_heads(k)  # (B, nh, T, hs)
            if self.rope:
                q, k = rotate(q), rotate(k)
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, self.v_norm(self.split_heads(v))

    def qk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head queries and keys as they enter the dot product (probes read these)."""
        q, k, _ = self.qkv(x)
        return q, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x)  # (B, nh, T, hs) each
        if self.softcap is None:
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                is_causal=self.causal,
                dropout_p=self.dropout if self.training else 0.0,
                scale=self.softmax_scale,
            )  # (B, nh, T, hs)
        else:
            y = self.capped_attention(q, k, v)
        if self.gate_proj is not None:
            g = torch.sigmoid(self.gate_proj(x))  # (B, T, nh) or (B, T, C)
            y = y * (
                g.transpose(1, 2).unsqueeze(-1) if self.gate == "headwise" else self.split_heads(g)
            )
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.out_proj(y)

    def capped_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(softcap(q.k * scale)) v, causal when the model is."""
        logits = softcap((q @ k.transpose(-2, -1)) * self.scale, self.softcap)  # (B, nh, T, T)
        if self.causal:
            T = q.shape[-2]
            future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
            logits = logits.masked_fill(future, float("-inf"))
        weights = F.dropout(logits.softmax(-1), self.dropout if self.training else 0.0)
        return weights @ v  # (B, nh, T, hs)


class MLP(nn.Module):
    """fc1 -> hidden_scale -> activation (ACTIVATIONS) -> fc2, hidden width mlp_ratio * n_embd.

    hidden_scale is an identity but in nGPT, which scales the hidden units (models/ngpt.py).
    """

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
        self.hidden_scale: nn.Module = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.act(self.hidden_scale(self.fc1(x)))))

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


class Scaled(nn.Module):
    """A module whose output is multiplied by a constant (its state under ``child``): CompleteP's
    branch multiplier, muP's output multiplier (models/param.py)."""

    child = "inner"

    def __init__(self, inner: nn.Module, scale: float) -> None:
        super().__init__()
        setattr(self, self.child, inner)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, self.child)(x) * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"


class ScaledNorm(Scaled):
    """LayerNorm Scaling's norm(x) / sqrt(l), its state under ``norm`` as checkpoints hold it."""

    child = "norm"


class Sum(nn.Module):
    """A residual sum: the branch reads the stream x itself, ``forward(branch, x)`` adds it back
    (a hyper-connection's ``split`` mixes the streams first, models/connections.py)."""

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x


class ScaledResidual(Sum):
    """branch + alpha * x, alpha a constant: 1, DeepNorm's (2N)^(1/4), or B2T's weight s of the
    block input x0 added to the MLP branch (Takase et al. 2023)."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, branch: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # torch.add(branch, x, alpha=a) is branch + a * x; autograd skips the multiply at a = 1.
        return torch.add(branch, x, alpha=self.alpha)


class OmegaResidual(Sum):
    """Admin's skip (Liu et al. 2020): branch + omega * x, omega learnable per feature, 1 until
    Stack.profile_init sets it from one forward pass at init."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.omega = nn.Parameter(torch.ones(dim))

    def forward(self, branch: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(branch, x, self.omega)


# Residual kind (placement.RESIDUAL_KINDS) -> module, given alpha and the feature size.
RESIDUALS: dict[str, Callable[[float, int], nn.Module]] = {
    "scale": lambda alpha, dim: ScaledResidual(alpha),
    "omega": lambda alpha, dim: OmegaResidual(dim),
}

# Slot kind (placement.SLOT_KINDS) -> module, given the model's norm factory and the feature size.
SLOTS: dict[str, Callable[[NormFactory, int], nn.Module]] = {
    "none": lambda make_norm, dim: nn.Identity(),
    "norm": lambda make_norm, dim: make_norm(dim),
    "gate": lambda make_norm, dim: Gate(),
}


class Block(nn.Module):
    """One Transformer layer with input x0: an attention and an MLP residual sub-layer,

        h = Post( Residual( BranchOut( Attn( Pre(x0) ) ), x0 ) )
        y = Post( Residual( BranchOut( MLP( Pre(h) ) ) + s * x0, h ) )

    with Residual(b, x) = b + alpha * x, or b + omega * x (Admin); with ``model.connection`` a
    hyper-connection reads the branch input from n streams and writes the branch back to them
    (models/connections.py: split, then the sum). Each placement fills the slots:

    Post-LN  (Post = LN):                      y = LN(x + F(x))
    Pre-LN   (Pre = LN):                       y = x + F(LN(x))
    DeepNorm (as Post-LN, alpha = (2N)^(1/4)): y = LN(alpha * x + F(x))
    Sandwich (Pre = BranchOut = LN):           y = x + LN(F(LN(x)))
    ReZero   (BranchOut = gate a, init 0):     y = x + a * F(x), one a per layer (both
                                               sub-layers; placement.gates=sublayer: one each)
    B2T      (as Post-LN, s = 1):              h = LN(x0 + Attn(x0)); y = LN(x0 + h + MLP(h))
    Admin    (as Post-LN, skip weight omega):  y = LN(omega * x + F(x))
    LNS      (Pre-LN, norms scaled 1/sqrt(l)): y = x + F(LN(x) / sqrt(l))
    Reorder  (BranchOut = LN):                 y = x + LN(F(x))
    Hybrid   (attention: Post = LN, QKV-norm;  h = LN(x0 + Attn_qkv(x0)); y = h + MLP(h)
              MLP: no norm)
    Mix-LN: the model gives its first layers Post-LN records and the rest Pre-LN records.

    A slot holds nn.Identity(), a norm (scaled for LNS) or a Gate, and s is 0 but for B2T, so
    forward has no placement branches. Under param=completep each BranchOut is times m_L^-alpha,
    and under muP or CompleteP the attention logits are scaled by 1/d_h (models/param.py). The
    norm config's options (alpha for dyt, groups for groupnorm) reach every norm; `qk_norm` (or
    the placement's QKV-norm) adds the per-head norm named by the norm's registry entry.
    `layer` is the block's depth l, 1-based.
    """

    def __init__(
        self,
        cfg: BlockConfig,
        placement: Placement,
        alpha: float = 1.0,
        causal: bool = True,
        layer: int = 1,
    ) -> None:
        super().__init__()
        if placement.layers is not None:
            raise ValueError(
                f"placement={placement.name} differs by layer; build each Block from "
                "models.placement.layer_placements(...)"
            )
        scale = placement.norm_scale(layer) if placement.norm_scale else None

        def make_norm(dim: int, attn_input: bool = False) -> nn.Module:
            norm = cfg.norm.build(dim, attn_input=attn_input)
            return norm if scale is None else ScaledNorm(norm, scale)

        def make_attn_input_norm(dim: int) -> nn.Module:
            return make_norm(dim, attn_input=True)

        def make_qk_norm(dim: int) -> nn.Module:
            return cfg.norm.build(dim, get_norm(cfg.norm.name).qk)

        d = cfg.n_embd
        self.placement_name = placement.name  # per layer: Mix-LN's blocks say post or pre
        self.alpha = alpha
        self.input_skip = placement.input_skip
        self.mlp_skip = ScaledResidual(self.input_skip) if self.input_skip else NoSkip()
        self.attn = Attention(
            d,
            cfg.n_head,
            causal=causal,
            dropout=cfg.dropout,
            bias=cfg.bias,
            qk_norm=make_qk_norm if cfg.qk_norm or placement.qkv_norm else None,
            v_norm=make_qk_norm if placement.qkv_norm else None,
            qk_full_width=cfg.qk_norm and cfg.qk_norm_width == "full",
            rope=cfg.pos == "rope",
            softcap=cfg.attn_softcap,
            gate=cfg.attn_gate,
            softmax_scale=cfg.param.attn_scale(d, cfg.n_head),  # muP's 1 / d_h; None: SP's
        )
        self.mlp = MLP(d, cfg.mlp_ratio, cfg.dropout, cfg.bias, cfg.activation)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.attn_pre, self.attn_branch_out, self.attn_post = (
            SLOTS[kind](make_attn_input_norm if k == 0 else make_norm, d)
            for k, kind in enumerate(placement.attn_slots)
        )
        self.mlp_pre, self.mlp_branch_out, self.mlp_post = (
            SLOTS[kind](make_norm, d) for kind in placement.mlp_slots
        )
        if cfg.placement.gates == "layer" and all(
            isinstance(m, Gate) for m in (self.attn_branch_out, self.mlp_branch_out)
        ):  # ReZero: one gate a for both sub-layers of the layer
            self.mlp_branch_out = self.attn_branch_out
        branch = cfg.param.branch_mult(cfg.n_layer)  # CompleteP's m_L^-alpha (models/param.py)
        if branch != 1.0:
            self.attn_branch_out = Scaled(self.attn_branch_out, branch)
            self.mlp_branch_out = Scaled(self.mlp_branch_out, branch)
        self.attn_residual, self.mlp_residual = (
            RESIDUALS[placement.residual](alpha, d)
            if not get_connection(cfg.connection).hyper
            else HyperConnection(
                d,
                cfg.streams,
                cfg.fracs,
                2 * (layer - 1) + k,
                get_connection(cfg.connection),
                cfg.sinkhorn_iters,
                cfg.stream_noise,
            )  # fmt: skip
            for k in (0, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x0 = x
        h, x = self.attn_residual.split(x)
        h = self.attn_drop(self.attn(self.attn_pre(h)))
        x = self.attn_post(self.attn_residual(self.attn_branch_out(h), x))
        h, x = self.mlp_residual.split(x)
        h = self.mlp_skip(self.mlp_branch_out(self.mlp(self.mlp_pre(h))), x0)
        return self.mlp_post(self.mlp_residual(h, x))

    def extra_repr(self) -> str:
        return f"{self.placement_name}, alpha={self.alpha:.4g}, input_skip={self.input_skip:g}"


def build_blocks(cfg: BlockConfig, placement: Placement, alpha: float) -> nn.ModuleList:
    """The n_layer Blocks of a model's config (Mix-LN: each layer's own placement)."""
    placements = layer_placements(placement, cfg.n_layer, cfg.placement.mix_fraction)
    return nn.ModuleList(
        Block(cfg, p, alpha, causal=cfg.causal, layer=i + 1) for i, p in enumerate(placements)
    )
