"""A small Vision Transformer whose norm placement and norm type come from the config."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.init import apply_weight_norm, check_init, init_weights
from models.layers import build_blocks, get_activation
from models.norms import build_norm
from models.placement import get_placement, resolve_scales

POOLS = ("cls", "mean")


@dataclass
class ViTConfig:
    image_size: int = 8
    patch_size: int = 2
    in_chans: int = 1
    num_classes: int = 10
    n_layer: int = 6
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    pool: str = "cls"
    placement: str = "pre"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    init: str = "xavier"
    mlp_ratio: int = 4
    deepnorm_alpha: float | None = None  # None: from the depth formula
    deepnorm_beta: float | None = None
    mix_fraction: float = 0.25  # placement=mix: share of leading Post-LN layers (Li et al. 2024)
    dyt_alpha: float = 0.5  # norm=dyt: init of the tanh scale a (Zhu et al. 2025)
    norm_groups: int = 8  # norm=groupnorm: groups over n_embd, must divide it
    qk_norm: bool = False  # normalize each head's q and k (Wortsman et al. 2023)
    weight_norm: bool = False  # w = g * v / ||v|| on the block Linears (Salimans & Kingma 2016)
    activation: str = "gelu"  # the MLP's: gelu | gelu_tanh (GPT-2's) | relu

    def __post_init__(self) -> None:
        for name in (
            "image_size",
            "patch_size",
            "in_chans",
            "num_classes",
            "n_layer",
            "n_head",
            "n_embd",
            "mlp_ratio",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
        if self.image_size % self.patch_size != 0:
            raise ValueError(
                f"model.image_size={self.image_size} is not divisible by "
                f"model.patch_size={self.patch_size}; pick a patch size that divides it"
            )
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}; "
                "pick n_embd as a multiple of n_head"
            )
        if self.pool not in POOLS:
            raise ValueError(f"unknown pool '{self.pool}'; choose one of: {', '.join(POOLS)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.norm_eps <= 0:
            raise ValueError(f"model.norm_eps must be > 0, got {self.norm_eps}")
        if not 0.0 <= self.mix_fraction <= 1.0:
            raise ValueError(f"model.mix_fraction must be in [0, 1], got {self.mix_fraction}")
        build_norm(self.norm, self.n_embd, self.norm_eps, **self.norm_opts)  # bad options fail here
        check_init(self.init)
        get_activation(self.activation)

    @property
    def norm_opts(self) -> dict[str, float]:
        """Options every norm receives; each takes the ones it understands."""
        return {"alpha": self.dyt_alpha, "groups": self.norm_groups}

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class ViT(nn.Module):
    """Patches (+ cls token) + positions -> n_layer Blocks -> (final norm) -> pool -> head."""

    kind = "encoder"

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        placement = get_placement(cfg.placement)
        self.alpha, self.beta = resolve_scales(
            placement, cfg.n_layer, self.kind, cfg.deepnorm_alpha, cfg.deepnorm_beta
        )
        patch_dim = cfg.in_chans * cfg.patch_size**2
        n_tokens = cfg.num_patches + (1 if cfg.pool == "cls" else 0)
        self.patch_embed = nn.Linear(patch_dim, cfg.n_embd)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.n_embd)) if cfg.pool == "cls" else None
        self.pos_emb = nn.Parameter(torch.zeros(1, n_tokens, cfg.n_embd))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = build_blocks(cfg, placement, self.alpha, causal=False)
        self.final_norm = (
            build_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, **cfg.norm_opts)
            if placement.final_norm
            else nn.Identity()
        )
        self.head = nn.Linear(cfg.n_embd, cfg.num_classes)
        init_weights(self, cfg.init, cfg.n_layer, self.beta)
        if cfg.weight_norm:  # after init, so the effective weights are the initialized ones
            apply_weight_norm(self)
        with torch.no_grad():
            nn.init.normal_(self.pos_emb, std=0.02)
            if self.cls_token is not None:
                nn.init.normal_(self.cls_token, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        B, C, H, W = images.shape
        p = self.cfg.patch_size
        x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, gh, p, gw, p)
        x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, p, p)
        return x.reshape(B, (H // p) * (W // p), C * p * p)  # (B, N, C*p*p)

    def forward(
        self, images: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, C, H, W = images.shape
        if (self.cfg.in_chans, self.cfg.image_size, self.cfg.image_size) != (C, H, W):
            raise ValueError(
                f"images of shape (C, H, W)={(C, H, W)} do not match the model's "
                f"({self.cfg.in_chans}, {self.cfg.image_size}, {self.cfg.image_size})"
            )
        x = self.patch_embed(self.patchify(images))  # (B, N, C)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)  # (B, 1+N, C)
        x = self.drop(x + self.pos_emb)
        for block in self.blocks:
            x = block(x)
        # Normalize the tokens before pooling: norms with statistics across tokens or the batch
        # (instancenorm, batchnorm) need the whole sequence; for the cls token it is the same.
        x = self.final_norm(x)  # (B, N', C)
        x = x[:, 0] if self.cls_token is not None else x.mean(dim=1)  # (B, C)
        logits = self.head(x)  # (B, num_classes)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return logits, loss
