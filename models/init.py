"""Weight initialization, all in one place.

A base scheme (shared by every placement, so runs differ only in what a sweep varies) sets every
Linear weight; embeddings get N(0, 0.02); biases and norm shifts start at 0, norm gains at 1.
Then DeepNorm's beta multiplies the init of each block's v_proj, out_proj, fc1 and fc2 weights;
q_proj and k_proj keep gain 1 (Wang et al. 2022, Sec. 2.3). With the Xavier-normal base this is
exactly xavier_normal_(w, gain=beta). A scheme may also scale all six Linear weights of block l
(1-based) by a gain of l: DS-Init's 1/sqrt(l) (Zhang et al. 2019), on top of any placement's.

Weight normalization, when asked for, reparametrizes the block Linears after init, so g = ||w_init||
per output row and the effective weight is the initialized one, DeepNorm's beta included; so does
sigmaReparam, with gamma = sigma(w_init).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from models.catalog import INITS, check_init

EMBED_STD = 0.02


def xavier_normal(weight: torch.Tensor, n_layer: int, residual_out: bool) -> None:
    """Xavier-normal, std = sqrt(2 / (fan_in + fan_out)), as in Xiong 2020 and DeepNet."""
    nn.init.xavier_normal_(weight)


def gpt2_normal(weight: torch.Tensor, n_layer: int, residual_out: bool) -> None:
    """GPT-2 style: N(0, 0.02), with the projections that write into the residual stream
    (out_proj, fc2) scaled by 1/sqrt(2 * n_layer)."""
    std = EMBED_STD / math.sqrt(2 * n_layer) if residual_out else EMBED_STD
    nn.init.normal_(weight, mean=0.0, std=std)


# Each base draw's variance for a Linear weight of shape (fan_out, fan_in), up to factors that
# do not depend on the shape (GPT-2's 1 / (2 n_layer), the gains): what models/param.py reads to
# give a weight the variance its scheme gives it at another shape.
VARIANCES = {
    "xavier_normal": lambda fan_out, fan_in: 2.0 / (fan_in + fan_out),
    "gpt2_normal": lambda fan_out, fan_in: EMBED_STD**2,
}


def init_variance(scheme: str, shape: tuple[int, int]) -> float:
    """The variance the scheme's base draw gives a Linear weight of this shape (see VARIANCES)."""
    return VARIANCES[INITS[scheme].base](*shape)


@torch.no_grad()
def init_weights(model: nn.Module, scheme: str, n_layer: int, beta: float = 1.0) -> None:
    """Initialize `model` (a GPT or ViT exposing `.blocks`) with `scheme`, then apply beta."""
    check_init(name=scheme)
    base, layer_gain = globals()[INITS[scheme].base], INITS[scheme].layer_gain
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
    for layer, block in enumerate(model.blocks, start=1):
        for linear in (block.attn.v_proj, block.attn.out_proj, block.mlp.fc1, block.mlp.fc2):
            linear.weight.mul_(beta)
        if layer_gain is not None:
            for linear in block_linears(block):
                linear.weight.mul_(layer_gain(layer))


def block_linears(block: nn.Module) -> tuple[nn.Linear, ...]:
    """q, k, v, out, fc1, fc2 of one block."""
    a, m = block.attn, block.mlp
    return a.q_proj, a.k_proj, a.v_proj, a.out_proj, m.fc1, m.fc2


def apply_weight_norm(model: nn.Module) -> None:
    """w = g * v / ||v|| (Salimans & Kingma 2016) on every block Linear; call after init_weights.

    The Linears stay nn.Linear (parametrized) and `.weight` stays the effective weight.
    """
    for block in model.blocks:
        for linear in block_linears(block):
            weight_norm(linear, name="weight", dim=0)


class SigmaReparam(nn.Module):
    """sigmaReparam (Zhai et al. 2023, Eq. 2): w_hat = gamma * w / sigma(w), sigma(w) the spectral
    norm, gamma a learned scalar. As the authors' code (apple/ml-sigma-reparam): u starts as w's
    top right singular vector and gamma as sigma(w) (SVD at init, so w_hat = w), and each forward
    in training (grad enabled: not a probe's no-grad read) takes one power-iteration step,
    v = normalize(w u), u = normalize(w^T v), sigma = v^T w u, with no gradient through u and v.
    u and v are buffers: a checkpoint resumes them."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        with torch.no_grad():
            _, s, vh = torch.linalg.svd(weight, full_matrices=False)
        self.register_buffer("u", vh[0].clone())
        self.register_buffer("v", F.normalize(weight @ vh[0], dim=0))  # the last step's v
        self.gamma = nn.Parameter(s[:1].clone())

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        step = self.training and torch.is_grad_enabled()  # a training step, not a probe's read
        with torch.no_grad():
            v = F.normalize(weight @ self.u, dim=0)
            u = F.normalize(weight.T @ v, dim=0)
            if step:
                self.u.copy_(u)
                self.v.copy_(v)
        return weight * (self.gamma / (v @ weight @ u))


def apply_sigma_reparam(model: nn.Module) -> None:
    """sigmaReparam on every block Linear (the authors convert every Linear and Conv; normlab's
    embeddings and head stay plain); call after init_weights. `.weight` is the effective one."""
    for block in model.blocks:
        for linear in block_linears(block):
            parametrize.register_parametrization(linear, "weight", SigmaReparam(linear.weight))
