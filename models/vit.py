"""A small Vision Transformer whose norm placement and norm type come from the config."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ViTConfig  # noqa: F401 (importable from here)
from models.flops import training_flops_per_token
from models.layers import softcap
from models.stack import Stack


class ViT(Stack):
    """Patches (+ cls token) + positions -> n_layer Blocks -> (final norm) -> pool -> head;
    with ``pos=rope`` the positions rotate q and k inside each attention instead."""

    kind = "encoder"

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        patch_dim = cfg.in_chans * cfg.patch_size**2
        n_tokens = cfg.num_patches + (1 if cfg.pool == "cls" else 0)
        self.patch_embed = nn.Linear(patch_dim, cfg.n_embd)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.n_embd)) if cfg.pool == "cls" else None
        self.n_tokens = n_tokens
        # pos=rope: positions rotate q and k in every attention (over the token order), no table
        learned = cfg.pos == "learned"
        self.pos_emb = nn.Parameter(torch.zeros(1, n_tokens, cfg.n_embd)) if learned else None
        self.drop = nn.Dropout(cfg.dropout)
        self.build_stack(cfg, n_out=cfg.num_classes)
        self.head = nn.Linear(cfg.n_embd, cfg.num_classes)
        self.init_stack(cfg)
        with torch.no_grad():
            if self.pos_emb is not None:
                nn.init.normal_(self.pos_emb, std=0.02)
            if self.cls_token is not None:
                nn.init.normal_(self.cls_token, std=0.02)
        self.normalize_weights()

    def flops_per_unit(self) -> float:
        """Training FLOPs per image: 6N + 12 L P d per token for its P tokens (the GPT's count;
        N leaves out the position table, and the head, applied once, is counted per token)."""
        c = self.cfg
        tokens = self.n_tokens
        n = self.num_params() - (self.pos_emb.numel() if self.pos_emb is not None else 0)
        return tokens * training_flops_per_token(n, c.n_layer, tokens, c.n_embd)

    def embedding_weights(self) -> list[tuple[torch.Tensor, int]]:
        # The patch embedding's columns are the embeddings of single pixels: dim 0 of out x in.
        pos = [(self.pos_emb, -1)] if self.pos_emb is not None else []
        pairs = [(self.patch_embed.weight, 0), *pos, (self.head.weight, 1)]
        return pairs if self.cls_token is None else [*pairs, (self.cls_token, -1)]

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
        x = self.drop(x if self.pos_emb is None else x + self.pos_emb)
        x = self.run_blocks(x)
        # Normalize the tokens before pooling: norms with statistics across tokens or the batch
        # (instancenorm, batchnorm) need the whole sequence; for the cls token it is the same.
        x = self.final_norm(x)  # (B, N', C)
        x = x[:, 0] if self.cls_token is not None else x.mean(dim=1)  # (B, C)
        logits = softcap(self.logit_scale(self.head(x)), self.cfg.logit_softcap)  # (B, classes)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return logits, loss
