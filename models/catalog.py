"""What a model config may name, torch-free: the norms (NORMS), the init schemes (INITS) and the
MLP activations (ACTIVATIONS), each entry with what a config check needs to know about it.

Each entry names its implementation, which is resolved when a model is built (models/norms.py,
models/init.py, models/activations.py): so a config is checked key by key and value by value
(models/config.py) before torch is imported, and a bad value on the command line answers at
once. The placements (models/placement.py) are torch-free data already.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models.placement import inverse_sqrt_depth


# --- norms -------------------------------------------------------------------------------------
def positive_alpha(dim: int, alpha: float = 0.5, **_: Any) -> None:
    if not alpha > 0:
        raise ValueError(f"norm.alpha must be > 0, got {alpha}; the paper's default is 0.5")


def groups_divide(dim: int, groups: int = 8, **_: Any) -> None:
    if not isinstance(groups, int) or groups <= 0 or dim % groups != 0:
        raise ValueError(
            f"norm.groups={groups!r} does not divide the feature size {dim}; "
            "pick norm.groups as a positive divisor of model.n_embd"
        )


@dataclass(frozen=True)
class NormSpec:
    """A NORMS entry: the constructor (a class of models/norms.py by name, or a callable) and
    what a model needs to know before building it."""

    build: str | Callable[..., Any]  # (dim, eps, **options) -> module
    options: tuple[str, ...] = ()  # keyword options the constructor takes
    check: Callable[..., None] | None = None  # (dim, **options): raises on values it refuses
    mixes: frozenset[str] = field(default_factory=frozenset)  # "batch", "sequence"
    qk: str = "layernorm"  # the per-head norm qk-norm uses when this is the model's norm
    paper: str = ""

    def check_options(self, dim: int, **opts: Any) -> None:
        """Refuse the options this norm would refuse over ``dim`` features (torch-free)."""
        if self.check is not None:
            self.check(dim, **{k: v for k, v in opts.items() if k in self.options})

    def __call__(self, dim: int, eps: float = 1e-5, **opts: Any) -> Any:
        # A model passes all of its norm options; each norm takes the ones it understands.
        build = self.build
        if isinstance(build, str):  # resolved by name when built: this module stays torch-free
            build = getattr(importlib.import_module("models.norms"), build)
        return build(dim, eps, **{k: v for k, v in opts.items() if k in self.options})


NORMS: dict[str, NormSpec] = {
    "layernorm": NormSpec("LayerNorm", qk="layernorm", paper="Ba et al. 2016"),
    "rmsnorm": NormSpec("RMSNorm", qk="rmsnorm", paper="Zhang & Sennrich 2019"),
    "dyt": NormSpec(
        "DyT", options=("alpha",), check=positive_alpha, qk="dyt", paper="Zhu et al. 2025"
    ),
    "derf": NormSpec(
        "Derf", options=("alpha",), check=positive_alpha, qk="derf", paper="Chen et al. 2025"
    ),
    # A head's features are already one group, so qk-norm uses LayerNorm for GroupNorm.
    "seednorm": NormSpec("SeeDNorm", qk="seednorm", paper="Cai et al. 2025"),
    "groupnorm": NormSpec(
        "GroupNorm", options=("groups",), check=groups_divide, paper="Wu & He 2018"
    ),
    # qk-norm must act per token and head; the cross-token norms leave it to LayerNorm.
    "batchnorm": NormSpec(
        "BatchNorm", mixes=frozenset({"batch", "sequence"}), paper="Ioffe & Szegedy 2015"
    ),
    "instancenorm": NormSpec("InstanceNorm", mixes=frozenset({"sequence"}), paper="Ulyanov 2016"),
    # With no norm to borrow, qk-norm (when asked for) uses LayerNorm.
    "none": NormSpec("no_norm"),
}


def get_norm(name: str) -> NormSpec:
    if name not in NORMS:
        raise ValueError(f"unknown norm '{name}'; choose one of: {', '.join(sorted(NORMS))}")
    return NORMS[name]


def per_token_norms() -> list[str]:
    return sorted(name for name, spec in NORMS.items() if not spec.mixes)


def check_causal_norm(name: str) -> None:
    """Refuse norms whose statistics span the batch or the sequence in a causal model."""
    spec = get_norm(name)
    if spec.mixes:
        raise ValueError(
            f"norm={name} takes statistics across the {' and '.join(sorted(spec.mixes))}, which "
            "leaks future tokens into a causal LM's training; use "
            f"norm={'|'.join(per_token_norms())}, or model=vit"
        )


# --- init schemes ------------------------------------------------------------------------------
@dataclass(frozen=True)
class InitScheme:
    """An INITS entry: the base draw of every Linear weight (a function of models/init.py by
    name: weight, n_layer, writes into the residual stream), and the gain of block l's weights,
    l 1-based (None: no layer gain)."""

    base: str
    layer_gain: Callable[[int], float] | None = None
    paper: str = ""


INITS: dict[str, InitScheme] = {
    "xavier": InitScheme("xavier_normal", paper="Glorot & Bengio 2010"),
    "gpt2": InitScheme("gpt2_normal", paper="Radford et al. 2019"),
    # Xavier-normal, block l's weights times 1/sqrt(l): std = sqrt(2 / (fan_in + fan_out) / l).
    "ds": InitScheme("xavier_normal", layer_gain=inverse_sqrt_depth, paper="Zhang et al. 2019"),
}


def check_init(name: str) -> None:
    if name not in INITS:
        raise ValueError(f"unknown init '{name}'; choose one of: {', '.join(sorted(INITS))}")


# --- MLP activations ---------------------------------------------------------------------------
# name -> (the function of torch.nn.functional, its keyword arguments)
ACTIVATIONS: dict[str, tuple[str, dict[str, str]]] = {
    "gelu": ("gelu", {}),  # exact, erf-based (Hendrycks & Gimpel 2016)
    "gelu_tanh": ("gelu", {"approximate": "tanh"}),  # GPT-2's tanh approximation, fused
    "relu": ("relu", {}),  # the original Transformer's (Vaswani et al. 2017)
}


def check_activation(name: str) -> None:
    if name not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation '{name}'; choose model.activation from: {', '.join(ACTIVATIONS)}"
        )


# --- residual connections (models/connections.py) ----------------------------------------------
@dataclass(frozen=True)
class ConnectionSpec:
    """A CONNECTIONS entry: whether it widens the stream, learns per-token terms, and takes
    mHC's constraints."""

    name: str
    hyper: bool = True  # n streams and learned coefficients (models/connections.py)
    dynamic: bool = True  # per-token terms from the normed streams (tanh, or linear for mHC)
    manifold: bool = False  # mHC: sigmoid, 2 sigmoid and Sinkhorn on the coefficients
    lite: bool = False  # mHC-lite: H_res a convex combination of permutations, no Sinkhorn
    paper: str = ""


CONNECTIONS: dict[str, ConnectionSpec] = {
    c.name: c
    for c in (
        ConnectionSpec("residual", hyper=False, dynamic=False),  # the placement's own sum
        ConnectionSpec("hc", paper="Zhu et al. 2025 (DHC); fracs > 1: Zhu et al. 2025b"),
        ConnectionSpec("shc", dynamic=False, paper="Zhu et al. 2025 (SHC)"),
        ConnectionSpec("mhc", manifold=True, paper="Xie et al. 2025"),
        ConnectionSpec("mhc_lite", manifold=True, lite=True, paper="mHC-lite, 2026"),
    )
}


def get_connection(name: str) -> ConnectionSpec:
    if name not in CONNECTIONS:
        raise ValueError(
            f"unknown connection '{name}'; choose model.connection from: {', '.join(CONNECTIONS)}"
        )
    return CONNECTIONS[name]
