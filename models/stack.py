"""What the GPT and the ViT share around their inputs and outputs: the stack of Blocks.

A model builds its input embedding, calls ``build_stack`` (the Blocks as the placement asks,
and the final norm when it asks for one), builds its output head, then ``init_stack``.
"""

from __future__ import annotations

from torch import nn

from models.config import BlockConfig
from models.init import apply_weight_norm, init_weights
from models.layers import build_blocks
from models.norms import build_norm
from models.placement import get_placement, resolve_scales


class Stack(nn.Module):
    """Base of the GPT and the ViT: n_layer Blocks, then a final norm or nn.Identity."""

    kind = "decoder"  # placement.STACK_KINDS: what the depth formulas count as the stack

    def build_stack(self, cfg: BlockConfig) -> None:
        """Sets alpha and beta (DeepNorm's, 1 otherwise), the Blocks and the final norm."""
        placement = get_placement(cfg.placement)
        self.alpha, self.beta = resolve_scales(
            placement, cfg.n_layer, self.kind, cfg.deepnorm_alpha, cfg.deepnorm_beta
        )
        self.blocks = build_blocks(cfg, placement, self.alpha, causal=cfg.causal)
        self.final_norm = (
            build_norm(cfg.norm, cfg.n_embd, cfg.norm_eps, **cfg.norm_opts)
            if placement.final_norm
            else nn.Identity()
        )

    def init_stack(self, cfg: BlockConfig) -> None:
        """Initialize every weight (models/init.py), then weight-normalize if asked: after
        init, so the effective weights are the initialized ones."""
        init_weights(self, cfg.init, cfg.n_layer, self.beta)
        if cfg.weight_norm:
            apply_weight_norm(self)

    def num_params(self) -> int:
        """Trainable parameters, counting tied weights once."""
        return sum(p.numel() for p in self.parameters())
