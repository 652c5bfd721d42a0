"""Shared pieces of the model tests: tiny configs, batches, references written out by hand."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.config import BlockConfig, NormConfig, PlacementConfig
from models.gpt import GPT, GPTConfig
from models.layers import Block
from models.norms import LayerNorm, RMSNorm
from models.placement import PLACEMENTS, get_placement
from models.vit import ViT, ViTConfig

TINY = dict(n_layer=2, n_head=2, n_embd=16)
TINY_GPT = dict(vocab_size=23, block_size=8, **TINY)
TINY_VIT = dict(image_size=4, patch_size=2, **TINY)
# Options of a placement or norm named by a string: mix_fraction 0.5, one Post-LN and one Pre-LN
# layer; 2 groups, GroupNorm over 8 features, since groups of 2 normalize to +-1 and hide most
# of the input from Post-LN stacks.
PLACEMENT_OPTIONS = dict(mix_fraction=0.5)
NORM_OPTIONS = dict(groups=2)


def tiny_config(cls: type, base: dict, **kw) -> BlockConfig:
    placement, norm = kw.pop("placement", "pre"), kw.pop("norm", "layernorm")
    if isinstance(placement, str):
        placement = PlacementConfig(name=placement, **PLACEMENT_OPTIONS)
    if isinstance(norm, str):
        norm = NormConfig(name=norm, **NORM_OPTIONS)
    return cls(**{**base, **kw}, placement=placement, norm=norm)


def gpt_config(**kw) -> GPTConfig:
    return tiny_config(GPTConfig, TINY_GPT, **kw)


def vit_config(**kw) -> ViTConfig:
    return tiny_config(ViTConfig, TINY_VIT, **kw)


def build(model_name: str, **kw) -> nn.Module:
    return GPT(gpt_config(**kw)) if model_name == "gpt" else ViT(vit_config(**kw))


def batch(model_name: str, n: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    if model_name == "gpt":
        idx = torch.randint(0, 23, (n, 8))
        return idx, idx
    return torch.randn(n, 1, 4, 4), torch.randint(0, 10, (n,))


def refused(placement: str, **options) -> bool:
    """Whether the placement refuses any of these model options."""
    return any(options.get(f) == v for f, v, _ in PLACEMENTS[placement].refuses)


def randomize_small_params(module: nn.Module, seed: int = 0) -> None:
    """Non-trivial values for every 0-D/1-D parameter (norm gains and shifts, gates, DyT's a,
    omegas, nGPT's scales, biases), so references check their use; Derf's ``shift`` (inside its
    erf) small, around 0, so the stack does not saturate."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim <= 1:
                u = torch.rand(p.shape, generator=g)
                p.copy_(0.2 * (u - 0.5) if name.endswith(".shift") else 0.5 + 0.5 * u)


def randomize_norm_params(module: nn.Module, seed: int = 0) -> None:
    """Give every LayerNorm and RMSNorm gains around 1 and shifts around 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, LayerNorm | RMSNorm):
                m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))


# ---------------------------------------------------------------- references by hand
class Known(nn.Module):
    """A fixed, nonlinear stand-in for a sub-layer."""

    def __init__(self, scale: float, shift: float) -> None:
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.scale * x + self.shift)


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(0.7 * x + 0.1)


def g(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(-1.3 * x + 0.2)


def ln(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """LayerNorm written out: biased variance, gain and shift."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def rms(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """RMSNorm written out: no centring, gain only."""
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) * norm.weight


NORM_REFS = {"layernorm": ln, "rmsnorm": rms}


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)  # (B, nh, T, hs)


def attention(q, k, v, scale: float, causal: bool) -> torch.Tensor:
    """softmax(q.k * scale) v per head, written out; (B, nh, T, hs) -> (B, T, C)."""
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        T = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    y = scores.softmax(-1) @ v
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).reshape(B, T, nh * hs)


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


def block_cfg(norm: str = "layernorm", **kw) -> BlockConfig:
    return BlockConfig(**{"n_embd": 8, "n_head": 2, "norm": norm, **kw})


def known_block(placement: str, norm: str = "layernorm", alpha: float = 1.0, layer: int = 1):
    """A Block of `placement` whose attention and MLP are the fixed f and g."""
    block = Block(block_cfg(norm), get_placement(placement), alpha, layer=layer)
    randomize_small_params(block)
    block.attn, block.mlp = Known(0.7, 0.1), Known(-1.3, 0.2)
    return block
