"""Attention probes, from the queries and keys each layer really uses (its q/k norm included):

    attn/max_logit[/layer_{i}]   max over batch, heads and allowed pairs of s_ij = q_i.k_j / sqrt(d)
    attn/entropy/layer_{i}       mean over batch, heads and query rows i of -sum_j p_ij log p_ij
    attn/entropy_min/layer_{i}   the same mean per head, then the minimum over heads

with p_i = softmax_j(s_ij) over the keys the row may see (j <= i when causal). A row that puts all
its weight on one key has H = 0; a uniform row over n keys has H = log n. Entropy collapse towards
0 accompanies divergence (Zhai et al. 2023).
"""

from __future__ import annotations

import torch
from torch import nn

from models.attention_scores import attention_scores
from runs import metric_names as names
from training.probes.forward import ForwardMeasure


def max_attn_logit(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Max of q.k/sqrt(d_head) over batch, heads and query-key pairs; causal attention counts
    only keys j <= query i, the pairs its softmax sees."""
    return attention_scores(attn, x).amax()


def head_entropies(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Mean row entropy per head, (nh,): -sum_j p_ij log p_ij averaged over batch and rows."""
    p = attention_scores(attn, x).softmax(dim=-1)  # (B, nh, T, T); masked keys get p = 0
    rows = torch.special.entr(p).sum(dim=-1)  # (B, nh, T); entr(0) = 0
    return rows.mean(dim=(0, 2))  # (nh,)


class MaxAttnLogit(ForwardMeasure):
    """Largest attention logit per layer, from the input the attention module receives."""

    def attach(self, model):
        self.per_layer: dict[int, torch.Tensor] = {}

        def hook(i: int):
            def fn(module, args):
                self.per_layer[i] = max_attn_logit(module, args[0])

            return fn

        return [b.attn.register_forward_pre_hook(hook(i)) for i, b in enumerate(model.blocks)]

    def read(self, logits, step):
        out = {names.per_layer(names.MAX_LOGIT, i): v for i, v in sorted(self.per_layer.items())}
        out[names.MAX_LOGIT] = torch.stack(list(self.per_layer.values())).amax()
        return out


class AttnEntropy(ForwardMeasure):
    """Attention entropy per layer: the mean over heads and the minimum over heads."""

    def attach(self, model):
        self.per_layer: dict[int, torch.Tensor] = {}

        def hook(i: int):
            def fn(module, args):
                self.per_layer[i] = head_entropies(module, args[0])

            return fn

        return [b.attn.register_forward_pre_hook(hook(i)) for i, b in enumerate(model.blocks)]

    def read(self, logits, step):
        out = {}
        for i, heads in sorted(self.per_layer.items()):
            out[names.per_layer(names.ATTN_ENTROPY, i)] = heads.mean()
            out[names.per_layer(names.ATTN_ENTROPY_MIN, i)] = heads.amin()
        return out
