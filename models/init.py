"""Weight initialization, all in one place.

A base scheme (shared by every placement, so runs differ only in what a sweep varies) sets every
Linear weight; embeddings get N(0, 0.02); biases and norm shifts start at 0, norm gains at 1.
Then DeepNorm's beta multiplies the init of each block's v_proj, out_proj, fc1 and fc2 weights;
q_proj and k_proj keep gain 1 (Wang et al. 2022, Sec. 2.3). With the Xavier-normal base this is
exactly xavier_normal_(w, gain=beta).

Weight normalization, when asked for, reparametrizes the block Linears after init, so g = ||w_init||
per output row and the effective weight is the initialized one, DeepNorm's beta included.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

EMBED_STD = 0.02


def xavier_normal(weight: torch.Tensor, n_layer: int, residual_out: bool) -> None:
    """Xavier-normal, std = sqrt(2 / (fan_in + fan_out)), as in Xiong 2020 and DeepNet."""
    nn.init.xavier_normal_(weight)


def gpt2_normal(weight: torch.Tensor, n_layer: int, residual_out: bool) -> None:
    """GPT-2 style: N(0, 0.02), with the projections that write into the residual stream
    (out_proj, fc2) scaled by 1/sqrt(2 * n_layer)."""
    std = EMBED_STD / math.sqrt(2 * n_layer) if residual_out else EMBED_STD
    nn.init.normal_(weight, mean=0.0, std=std)


INITS: dict[str, Callable[[torch.Tensor, int, bool], None]] = {
    "xavier": xavier_normal,
    "gpt2": gpt2_normal,
}


def check_init(name: str) -> None:
    if name not in INITS:
        raise ValueError(f"unknown init '{name}'; choose one of: {', '.join(sorted(INITS))}")


@torch.no_grad()
def init_weights(model: nn.Module, scheme: str, n_layer: int, beta: float = 1.0) -> None:
    """Initialize `model` (a GPT or ViT exposing `.blocks`) with `scheme`, then apply beta."""
    check_init(name=scheme)
    base = INITS[scheme]
    residual_out = set()
    for block in model.blocks:
        residual_out |= {id(block.attn.out_proj), id(block.mlp.fc2)}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            base(module.weight, n_layer, id(module) in residual_out)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=EMBED_STD)
    for block in model.blocks:
        for linear in (block.attn.v_proj, block.attn.out_proj, block.mlp.fc1, block.mlp.fc2):
            linear.weight.mul_(beta)


def apply_weight_norm(model: nn.Module) -> None:
    """w = g * v / ||v|| (Salimans & Kingma 2016) on every block Linear; call after init_weights.

    The Linears stay nn.Linear (parametrized) and `.weight` stays the effective weight.
    """
    for block in model.blocks:
        for linear in (
            block.attn.q_proj,
            block.attn.k_proj,
            block.attn.v_proj,
            block.attn.out_proj,
            block.mlp.fc1,
            block.mlp.fc2,
        ):
            weight_norm(linear, name="weight", dim=0)
