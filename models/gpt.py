"""A small causal GPT whose norm placement and norm type come from the config."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.init import apply_weight_norm, check_init, init_weights
from models.layers import build_blocks, get_activation
from models.norms import build_norm, check_causal_norm
from models.placement import get_placement, resolve_scales


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 128  # context length
    n_layer: int = 6
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    placement: str = "pre"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    tie_weights: bool = True
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
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "mlp_ratio"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}; "
                "pick n_embd as a multiple of n_head"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.norm_eps <= 0:
            raise ValueError(f"model.norm_eps must be > 0, got {self.norm_eps}")
        if not 0.0 <= self.mix_fraction <= 1.0:
            raise ValueError(f"model.mix_fraction must be in [0, 1], got {self.mix_fraction}")
        check_causal_norm(self.norm)
        build_norm(self.norm, self.n_embd, self.norm_eps, **self.norm_opts)  # bad options fail here
        check_init(self.init)
        get_activation(self.activation)

    @property
    def norm_opts(self) -> dict[str, float]:
        """Options every norm receives; each takes the ones it understands."""
        return {"alpha": self.dyt_alpha, "groups": self.norm_groups}


class GPT(nn.Module):
    """Token + position embeddings -> n_layer Blocks -> (final norm) -> LM head."""

    kind = "decoder"

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        placement = get_placement(cfg.placement)
        self.alpha, self.beta = resolve_scales(
            placement, cfg.n_layer, self.kind, cfg.deepnorm_alpha, cfg.deepnorm_beta
        )
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = build_blocks(cfg, placement, self.alpha, causal=True)
        self.final_norm = (
            build_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, **cfg.norm_opts)
            if placement.final_norm
            else nn.Identity()
        )
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        init_weights(self, cfg.init, cfg.n_layer, self.beta)
        if cfg.weight_norm:  # after init, so the effective weights are the initialized ones
            apply_weight_norm(self)
        if cfg.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    def num_params(self) -> int:
        """Trainable parameters, counting tied weights once."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.shape
        if self.cfg.block_size < T:
            raise ValueError(f"sequence length {T} exceeds block_size={self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss
