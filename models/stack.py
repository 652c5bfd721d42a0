"""What the GPT and the ViT share around their inputs and outputs: the stack of Blocks.

A model builds its input embedding, calls ``build_stack`` (the blocks the placement names, the
final norm when it asks for one, the scale on the logits), builds its output head, then
``init_stack``. Two placements need more than the weights' init, and get it here as methods a
harness may call on any model (no-ops for the other placements):

- ``profile_init(inputs)``: Admin's omegas from one forward pass at init (Liu et al. 2020).
- ``normalize_weights()``: nGPT's matrices and embeddings back on the unit sphere, after every
  optimizer step (Loshchilov et al. 2024).
- ``after_step()``: what must follow every optimizer step: nGPT's sphere and, with
  ``model.qk_clip``, QK-clip's rescale of the heads whose logits passed tau (models/qk_clip.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models import connections, layers, ngpt, param
from models.config import BlockConfig
from models.init import apply_sigma_reparam, apply_weight_norm, init_weights
from models.layers import OmegaResidual
from models.placement import Placement, get_placement, resolve_scales
from models.precision import simulate_precision
from models.qk_clip import QKClip


@dataclass(frozen=True)
class BlockKind:
    """What a placement's `block` field (placement.BLOCK_KINDS) builds."""

    build: Callable[[BlockConfig, Placement, float], nn.ModuleList]  # (cfg, placement, alpha)
    logit_scale: Callable[[int, int], nn.Module]  # (outputs, n_embd) -> module on the logits
    on_sphere: bool = False  # weights normalized at init and by normalize_weights()


BLOCKS: dict[str, BlockKind] = {
    "residual": BlockKind(layers.build_blocks, lambda n_out, d: nn.Identity()),
    "normalized": BlockKind(ngpt.build_blocks, ngpt.LogitScale, on_sphere=True),
}


class Stack(nn.Module):
    """Base of the GPT and the ViT: n_layer blocks, then a final norm or nn.Identity."""

    kind = "decoder"  # placement.STACK_KINDS: what the depth formulas count as the stack

    def build_stack(self, cfg: BlockConfig, n_out: int) -> None:
        """Sets alpha and beta (DeepNorm's, 1 otherwise), the blocks, the final norm and the
        scale on the model's n_out logits (nGPT's s_z, an identity otherwise)."""
        placement = get_placement(cfg.placement.name)
        block_kind = BLOCKS[placement.block]
        self.on_sphere = block_kind.on_sphere
        self.alpha, self.beta = resolve_scales(
            placement, cfg.n_layer, self.kind, cfg.placement.alpha, cfg.placement.beta
        )
        self.blocks = block_kind.build(cfg, placement, self.alpha)
        self.final_norm = cfg.norm.build(cfg.n_embd) if placement.final_norm else nn.Identity()
        self.logit_scale = block_kind.logit_scale(n_out, cfg.n_embd)
        output_mult = cfg.param.output_mult(cfg.n_embd)  # muP's 1 / m_N (models/param.py)
        if output_mult != 1.0:
            self.logit_scale = layers.Scaled(self.logit_scale, output_mult)
        if cfg.sim_dtype is not None:
            simulate_precision(self.blocks, cfg.sim_dtype)
        attentions = [b.attn for b in self.blocks]
        self.qk_clip = None if cfg.qk_clip is None else QKClip(attentions, cfg.qk_clip)

    def run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """The blocks on x (B, T, C); with n residual streams (model.streams) x starts as every
        stream and the streams' sum comes out (models/connections.py)."""
        x = connections.expand(x, self.cfg.streams)
        for block in self.blocks:
            x = block(x)
        return connections.reduce(x, self.cfg.streams)

    def init_stack(self, cfg: BlockConfig) -> None:
        """Initialize every weight (models/init.py), rescale it to the parametrization's and
        keep each parameter's optimizer scales (models/param.py), then weight-normalize or
        sigma-reparametrize if asked: last, so the effective weights are the initialized ones."""
        init_weights(self, cfg.init, cfg.n_layer, self.beta)
        self.param_scales = param.apply(self)
        if cfg.weight_norm:
            apply_weight_norm(self)
        if cfg.sigma_reparam:
            apply_sigma_reparam(self)

    def derived(self) -> dict[str, float]:
        """The constants the model computed rather than was given: the residual scale alpha and
        the branch init gain beta (DeepNorm's formulas; 1 where unused) and Admin's profiled
        omegas (mean, min and max over sub-layers and features, as they are now: profiled at init,
        then learned) where there are any."""
        out = {"alpha": float(self.alpha), "beta": float(self.beta)}
        if self.cfg.param.name != "sp":
            out.update(param.describe(self.cfg))
        omegas = [m.omega.detach().flatten() for m in self.modules() if hasattr(m, "omega")]
        if omegas:
            flat = torch.cat(omegas).float()
            out.update(
                omega_mean=flat.mean().item(),
                omega_min=flat.min().item(),
                omega_max=flat.max().item(),
            )
        return out

    def num_params(self) -> int:
        """Trainable parameters, counting tied weights once."""
        return sum(p.numel() for p in self.parameters())

    def embedding_weights(self) -> list[tuple[torch.Tensor, int]]:
        """(weight, dim) pairs of the model's own embeddings and head, dim the model dimension."""
        raise NotImplementedError

    def after_step(self) -> None:
        """The harness calls this after every optimizer step (training/ngpt.py)."""
        self.normalize_weights()
        if self.qk_clip is not None:
            self.qk_clip.clip()

    @torch.no_grad()
    def normalize_weights(self) -> None:
        """nGPT: every embedding and block matrix to unit norm along the model dimension; a
        no-op for the other placements. Models call it at init, the harness after each step."""
        if not self.on_sphere:
            return
        pairs = self.embedding_weights() + [p for b in self.blocks for p in b.sphere_weights()]
        for weight, dim in pairs:
            weight.copy_(F.normalize(weight, dim=dim))

    @torch.no_grad()
    def profile_init(self, inputs: torch.Tensor) -> None:
        """Admin's omegas (Liu et al. 2020) from one forward pass on `inputs`, in eval mode with
        every omega = 1: sub-layer i (attention and MLP each count, in order) gets

            omega_i = sqrt( 1 + sum_{j<i} Var[F_j(x_{j-1})] / Var[x_{j-1}] )

        Var over every element of the batch. Each branch's variance is taken relative to its
        input's (1 after a norm; the embeddings' own for the first sub-layer, whose input
        counts as the 1). With unit-variance embeddings, as the paper's models have, this is its
        sqrt(Var[x_0] + sum_{j<i} Var[F_j]); the GPT's embeddings start at std 0.02, where that
        unscaled sum would make the first omegas ~0.03 and cut the skip (the token's own
        identity) out of the first sub-layers. A no-op for placements without omegas.
        """
        skips = [m for m in self.modules() if isinstance(m, OmegaResidual)]
        if not skips:
            return
        seen: list[tuple[torch.Tensor, torch.Tensor]] = []  # (branch, skip input) per sub-layer
        hooks = [m.register_forward_hook(lambda m, args, out: seen.append(args)) for m in skips]
        training = self.training
        try:
            for m in skips:
                m.omega.fill_(1.0)
            self.eval()
            self(inputs)
        finally:
            for hook in hooks:
                hook.remove()
            self.train(training)
        total = 1.0
        for m, (branch, x) in zip(skips, seen, strict=True):
            m.omega.fill_(math.sqrt(total))
            total += (branch.double().var(correction=0) / x.double().var(correction=0)).item()
