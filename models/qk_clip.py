"""QK-clip (Kimi Team 2025, Kimi K2, "MuonClip"): after each optimizer step, every attention
head whose largest logit in that step's forward passed tau has its query and key projections
scaled down, so that the same inputs would give at most tau:

    S_h = max over the batch and every (i, j) the mask allows of q_i . k_j * scale
    for each head with S_h > tau:   eta_h = tau / S_h,
    W_q^h <- W_q^h * sqrt(eta_h),   W_k^h <- W_k^h * sqrt(eta_h)

(the paper's split alpha = 0.5; biases, where the model has them, the same way). A head whose
every logit is negative (it happens within a few steps at d=64) is not over tau and is left as
it is: min(1, tau / S_h) would be negative there, and its square root NaN. ``scale`` is the
attention's own (1 / sqrt(d_h), or muP's). Kimi K2 applies it with Muon at tau = 100; the rescale
is a weight edit after the step, whatever the optimizer. S_h is read by a forward pre-hook on
each Attention during training forwards (one more q, k projection and q k^T per layer: the
logits sdpa never shows), never in evaluation or in a probe's no-grad pass.
"""

from __future__ import annotations

import torch
from torch import nn

from models.attention_scores import attention_scores


def head_max_logits(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(n_head,) the largest logit of each head over the batch, causal mask applied."""
    return attention_scores(attn, x).amax(dim=(0, 2, 3))


def global_max(tops: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Each layer's per-head max over every rank of the process group (itself, without one)."""
    import torch.distributed as dist

    if not tops or not (dist.is_available() and dist.is_initialized()):
        return dict(tops)
    keys = sorted(tops)
    stacked = torch.stack([tops[k] for k in keys])  # (layers, n_head)
    dist.all_reduce(stacked, op=dist.ReduceOp.MAX)
    return dict(zip(keys, stacked, strict=True))


class QKClip:
    """Records each Attention's per-head max logit in training forwards; ``clip()`` rescales."""

    def __init__(self, attentions: list[nn.Module], tau: float) -> None:
        self.attentions, self.tau = attentions, tau
        self.last: dict[int, torch.Tensor] = {}
        self.clipped_heads = 0  # heads rescaled since the model was built
        for i, attn in enumerate(attentions):
            attn.register_forward_pre_hook(self.recorder(i))

    def recorder(self, i: int):
        def record(attn: nn.Module, args: tuple) -> None:
            if attn.training and torch.is_grad_enabled():
                with torch.no_grad():
                    top = head_max_logits(attn, args[0])
                    # every micro-batch of the step (gradient accumulation): their max
                    self.last[i] = torch.maximum(self.last[i], top) if i in self.last else top

        return record

    @torch.no_grad()
    def clip(self) -> int:
        """Rescale the heads over tau in the step's training forwards (every micro-batch, every
        rank: under DDP each S_h is the max over the global batch, so every rank edits its
        weights alike); how many heads were."""
        tops = global_max(self.last)
        self.last = {}
        n = 0
        for i, attn in enumerate(self.attentions):
            if i not in tops:
                continue
            top = tops[i]
            # only heads over tau (a head whose every logit is negative must not get tau / S < 0)
            eta = torch.where(top > self.tau, self.tau / top, torch.ones_like(top))
            if bool((eta < 1.0).any()):
                per_row = eta.sqrt().repeat_interleave(attn.q_proj.out_features // attn.n_head)
                for proj in (attn.q_proj, attn.k_proj):
                    proj.weight.mul_(per_row.to(proj.weight.dtype)[:, None])
                    if proj.bias is not None:
                        proj.bias.mul_(per_row.to(proj.bias.dtype))
                n += int((eta < 1.0).sum())
        self.clipped_heads += n
        return n
