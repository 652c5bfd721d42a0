"""The attention logits as a layer's softmax sees them, recomputed from its input: the probes
(training/probes/attention.py, instruments.py) and QK-clip (models/qk_clip.py) read them, since
F.scaled_dot_product_attention never shows them."""

from __future__ import annotations

import math

import torch
from torch import nn

from models.layers import softcap


def attention_scores(attn: nn.Module, x: torch.Tensor, capped: bool = False) -> torch.Tensor:
    """s = q k^T / sqrt(d_head) in float32 (or times the attention's own softmax_scale, as
    nGPT's sqrt(d_head)), keys the softmax never sees set to -inf; ``capped``: soft-capped as
    the attention's softmax sees them when it has a soft-cap."""
    q, k = attn.qk(x)  # (B, nh, T, hs) each, after the q/k norm
    scores = q.float() @ k.float().transpose(-2, -1)  # (B, nh, T, T)
    own = getattr(attn, "softmax_scale", None)
    scores = scores * own if own is not None else scores / math.sqrt(q.size(-1))
    if capped:
        scores = softcap(scores, getattr(attn, "softcap", None))
    if attn.causal:
        T = scores.size(-1)
        future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)  # (T, T)
        scores = scores.masked_fill(future, float("-inf"))
    return scores
