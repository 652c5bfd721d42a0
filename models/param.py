"""Parametrizations: how a model's init, its forward multipliers and each parameter's optimizer
settings scale with its width and depth (``param=sp|mup|completep``, models/config.py
ParamConfig).

SP, the standard parametrization, changes nothing. muP (Yang et al. 2022, Tensor Programs V,
Table 3, Adam-type optimizers) and CompleteP (Dey et al. 2025; alpha = 0.5 is depth-muP, Yang
et al. 2023 and Bordelon et al. 2023) are written relative to a base shape at which both equal SP
exactly, m_N = n_embd / base_width and m_L = n_layer / base_depth:

                          SP              muP                     CompleteP
    attention logits      q.k / sqrt(d_h) q.k sqrt(b_h) / d_h     as muP
    output logits         W x             W x / m_N               as muP
    residual branch       x + F(x)        x + F(x)                x + m_L^-alpha F(x)
    hidden matrices  init SP's            SP's at the base shape, times m_N^-1/2
                     lr   lr              lr / m_N                lr m_N^-1 m_L^(alpha-1)
                     wd   wd              wd m_N                  wd m_N
                     eps  eps             eps                     eps m_N^-1 m_L^-alpha
    block vectors    lr   lr              lr                      lr m_L^(alpha-1)
                     eps  eps             eps                     eps m_N^-1 m_L^-alpha
    embeddings, readout, final norm: SP's init at the base shape; lr and wd unchanged; eps
                          eps             eps                     eps m_N^-1

b_h is the head size at the base width. A parameter's kind comes from its shape against the same
model built at the base width, as the ``mup`` package infers it: matrix-like when both dimensions
grow with the width (the Blocks' projections), vector-like when one does (embeddings, the
readout, biases, norm gains), fixed when none. weight decay times m_N keeps AdamW's decay per
step, lr x wd, as it was. CompleteP's depth corrections reach the parameters inside the Blocks
only; the embeddings, the final norm and the readout keep theirs (EleutherAI's nanoGPT-mup
CompleteP branch groups them the same way). CompleteP's Adam eps follows the authors' code
(Eq. 40 of Dey et al. 2025, as their code applies it since its January 2025 fix): every eps
over m_N, those inside the Blocks over m_L^alpha too; muP leaves eps alone, as the ``mup``
package's MuAdam does. GPT-2's init (out_proj and fc2 over sqrt(2L)) is refused under
CompleteP: Table 1 has no such factor (models/config.py).

Placements: the branch multiplier scales each sub-layer's branch where it joins the stream, so
Post-LN is LN(x + m F(x)), DeepNorm LN(alpha x + m F(x)), Admin omega x + m F(x) (its omegas are
profiled with the scaled branches), ReZero a m F(x), and B2T's extra skip of the block input is
not a branch and stays unscaled. The derivations assume Pre-LN; for the other placements this is
normlab's choice, and F14 measures whether their best learning rate stays put. nGPT is refused
(models/config.py): its weights live on the unit sphere with learning rates of its own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from models.config import BlockConfig
from models.init import init_variance

MATRIX, VECTOR, FIXED = "matrix", "vector", "fixed"


@dataclass(frozen=True)
class Scales:
    """One parameter's multipliers of the optimizer's lr, weight decay and eps."""

    kind: str  # MATRIX, VECTOR or FIXED
    in_blocks: bool  # inside the Blocks: CompleteP's depth corrections reach it
    lr: float = 1.0
    weight_decay: float = 1.0
    eps: float = 1.0


def base_config(cfg: BlockConfig) -> BlockConfig:
    """The model's config at its base width: whose shapes say which dimensions grow. Same
    parametrization and depth, so its modules are the model's (a branch norm the depth
    multiplier wraps keeps its name)."""
    base = cfg.param.base_width or cfg.n_embd
    return dataclasses.replace(cfg, n_embd=base)


def shape_kind(shape: tuple[int, ...], base: tuple[int, ...]) -> str:
    """MATRIX, VECTOR or FIXED by how many dimensions differ from the base shape's."""
    grown = sum(a != b for a, b in zip(shape, base, strict=True))
    return MATRIX if grown >= 2 else VECTOR if grown == 1 else FIXED


def parameter_scales(model: nn.Module, base_model: nn.Module) -> dict[str, Scales]:
    """Every parameter's Scales under ``model.cfg.param`` (tied weights once, by first name)."""
    cfg = model.cfg
    param = cfg.param
    m_n, m_l = param.width_mult(cfg.n_embd), param.depth_mult(cfg.n_layer)
    depth_lr, depth_eps = m_l ** (param.alpha - 1), m_l**-param.alpha
    named = base_model.named_parameters(remove_duplicate=False)  # a tied head by its name too
    base_shapes = {name: tuple(p.shape) for name, p in named}
    out = {}
    for name, p in model.named_parameters():
        kind = shape_kind(tuple(p.shape), base_shapes[name])
        in_blocks = name.startswith("blocks.")
        lr, wd = (1 / m_n, m_n) if kind == MATRIX else (1.0, 1.0)
        lr *= depth_lr if in_blocks else 1.0
        eps = 1.0  # muP leaves Adam's eps alone; CompleteP scales every one
        if param.scales_depth:
            eps = (depth_eps if in_blocks else 1.0) / m_n
        out[name] = Scales(kind, in_blocks, lr, wd, eps)
    return out


def build_base(model: nn.Module) -> nn.Module:
    """The same model at its base width, on the meta device (shapes only, no memory)."""
    with torch.device("meta"):
        return type(model)(base_config(model.cfg))


@torch.no_grad()
def rescale_init(model: nn.Module, base_model: nn.Module, scales: dict[str, Scales]) -> None:
    """muP's init from SP's: each Linear weight drawn at the model's shape is rescaled to the
    variance the init scheme gives it at the base shape, times base_fan_in / fan_in for a
    matrix-like one. For Xavier's hidden matrices this is 1 (SP's init already scales as
    1 / width); the readout and the input layers keep the variance they have at the base width.
    Embeddings (N(0, 0.02), a constant) and a head tied to them need nothing."""
    scheme = model.cfg.init
    base = dict(base_model.named_parameters(remove_duplicate=False))
    for module_name, module in model.named_modules():
        name = f"{module_name}.weight"
        if not isinstance(module, nn.Linear) or name not in scales:  # a tied head: the table
            continue
        shape, base_shape = tuple(module.weight.shape), tuple(base[name].shape)
        target = init_variance(scheme, base_shape)
        if scales[name].kind == MATRIX:
            target *= base_shape[1] / shape[1]
        ratio = target / init_variance(scheme, shape)
        if not math.isclose(ratio, 1.0):
            module.weight.mul_(math.sqrt(ratio))


def apply(model: nn.Module) -> dict[str, Scales]:
    """The model's parametrization after its SP init: rescale the init, return the Scales its
    optimizer reads (every 1 under SP, and nothing rescaled)."""
    if model.cfg.param.name == "sp" or any(p.is_meta for p in model.parameters()):
        # SP, or a base model (meta: shapes only): every scale 1
        names = (name for name, _ in model.named_parameters())
        return {name: Scales(FIXED, name.startswith("blocks.")) for name in names}
    base_model = build_base(model)
    scales = parameter_scales(model, base_model)
    rescale_init(model, base_model, scales)
    return scales


def describe(cfg: BlockConfig) -> dict[str, float]:
    """The base shape and the multipliers a run records in summary.json's ``derived``."""
    param = cfg.param
    attn = param.attn_scale(cfg.n_embd, cfg.n_head)
    return {
        "base_width": float(param.base_width or cfg.n_embd),
        "base_depth": float(param.base_depth or cfg.n_layer),
        "width_mult": param.width_mult(cfg.n_embd),
        "depth_mult": param.depth_mult(cfg.n_layer),
        "attn_scale": attn if attn is not None else (cfg.n_embd / cfg.n_head) ** -0.5,
        "output_mult": param.output_mult(cfg.n_embd),
        "branch_mult": param.branch_mult(cfg.n_layer),
    }
