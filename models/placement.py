"""Where the norms sit in a residual block, expressed as data.

One residual sub-layer (attention or MLP) computes

    y = Post( alpha * x + BranchOut( F( Pre(x) ) ) [+ s * x0] )

Each placement says what each of the three slots holds (the model's norm, nothing, or ReZero's
learnable gate), how the residual scale alpha and the branch init gain beta follow from the depth,
the weight s of the block input x0 in the MLP sub-layer's sum (B2T's extra skip; 0 elsewhere),
whether a final norm follows the last block, and, for Mix-LN, which placement each layer uses.
The Block in layers.py reads this record; it never branches on a placement's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# "decoder": decoder-only stack (GPT); "encoder": encoder-only stack (ViT).
STACK_KINDS = ("decoder", "encoder")


def unit_scale(n_layer: int, kind: str) -> float:
    return 1.0


def deepnorm_alpha_beta(n_layer: int, kind: str) -> tuple[float, float]:
    """DeepNet (Wang et al. 2022) residual scale alpha and init gain beta for one-stack models.

    Decoder-only with M layers: alpha = (2M)^(1/4), beta = (8M)^(-1/4).
    Encoder-only with N layers: alpha = (2N)^(1/4), beta = (8N)^(-1/4).
    """
    if kind not in STACK_KINDS:
        raise ValueError(f"unknown stack kind '{kind}'; choose one of: {', '.join(STACK_KINDS)}")
    if n_layer <= 0:
        raise ValueError(f"n_layer must be positive, got {n_layer}")
    # The one-stack formulas coincide for the two kinds; they differ only in encoder-decoder models.
    return (2 * n_layer) ** 0.25, (8 * n_layer) ** -0.25


def deepnorm_alpha(n_layer: int, kind: str) -> float:
    return deepnorm_alpha_beta(n_layer, kind)[0]


def deepnorm_beta(n_layer: int, kind: str) -> float:
    return deepnorm_alpha_beta(n_layer, kind)[1]


# What a norm slot of a sub-layer holds (layers.SLOTS builds each): nothing, the model's norm, or
# a learnable scalar gate on the branch (ReZero's residual weight, init 0).
SLOT_KINDS = ("none", "norm", "gate")


@dataclass(frozen=True)
class Placement:
    """Slots of one residual sub-layer, the B2T skip, the depth rules for alpha and beta, and,
    for placements that differ by layer, the rule that names each layer's placement."""

    name: str
    pre: str = "none"  # slot on the branch input
    branch_out: str = "none"  # slot on the branch output, before the residual add
    post: str = "none"  # slot after the residual add
    final_norm: bool = False  # one more norm after the last block
    # Weight of the block's input in the MLP sub-layer's residual sum (B2T: 1, others: 0).
    input_skip: float = 0.0
    alpha: Callable[[int, str], float] = unit_scale  # residual scale from (n_layer, kind)
    beta: Callable[[int, str], float] = unit_scale  # init gain of v, out, fc1, fc2
    # (n_layer, mix_fraction) -> one placement name per layer; None: every layer is this one.
    layers: Callable[[int, float], list[str]] | None = None
    paper: str = ""

    def __post_init__(self) -> None:
        for slot in (self.pre, self.branch_out, self.post):
            if slot not in SLOT_KINDS:
                raise ValueError(f"unknown slot kind '{slot}'; choose one of: {SLOT_KINDS}")

    @property
    def slots(self) -> tuple[str, str, str]:
        return self.pre, self.branch_out, self.post

    @property
    def uses_deepnorm_scales(self) -> bool:
        return self.alpha is not unit_scale or self.beta is not unit_scale


def mix_post_layers(n_layer: int, fraction: float) -> int:
    """Mix-LN's count of leading Post-LN layers: floor(fraction * n_layer), as the paper's
    floor(alpha * L); the epsilon keeps e.g. 0.29 * 100 from flooring to 28."""
    return math.floor(fraction * n_layer + 1e-9)


def mix_layers(n_layer: int, fraction: float) -> list[str]:
    n_post = mix_post_layers(n_layer, fraction)
    return ["post"] * n_post + ["pre"] * (n_layer - n_post)


PLACEMENTS: dict[str, Placement] = {
    p.name: p
    for p in (
        Placement("post", post="norm", paper="Vaswani 2017"),
        Placement("pre", pre="norm", final_norm=True, paper="Xiong 2020"),
        Placement(
            "deepnorm", post="norm", alpha=deepnorm_alpha, beta=deepnorm_beta, paper="Wang 2022"
        ),
        Placement(
            "sandwich", pre="norm", branch_out="norm", final_norm=True, paper="Ding 2021, Kim 2025"
        ),
        # Post-LN in the first floor(fraction * L) layers, Pre-LN after them; the last layers are
        # Pre-LN, whose output is not normalized, so a final norm follows (the paper's LLaMA
        # models keep theirs). fraction = 0 is Pre-LN exactly.
        Placement("mix", final_norm=True, layers=mix_layers, paper="Li 2024"),
        Placement("b2t", post="norm", input_skip=1.0, paper="Takase 2023"),
        Placement("rezero", branch_out="gate", paper="Bachlechner 2020"),
    )
}

ALIASES: dict[str, str] = {"peri": "sandwich"}


def get_placement(name: str) -> Placement:
    name = ALIASES.get(name, name)
    if name not in PLACEMENTS:
        choices = sorted([*PLACEMENTS, *ALIASES])
        raise ValueError(f"unknown placement '{name}'; choose one of: {', '.join(choices)}")
    return PLACEMENTS[name]


def layer_placements(
    placement: Placement, n_layer: int, mix_fraction: float = 0.25
) -> list[Placement]:
    """The placement of each of n_layer blocks: the same record throughout, or the per-layer
    choice of a placement such as Mix-LN."""
    if not 0.0 <= mix_fraction <= 1.0:
        raise ValueError(f"mix_fraction must be in [0, 1], got {mix_fraction}")
    if placement.layers is None:
        return [placement] * n_layer
    return [get_placement(name) for name in placement.layers(n_layer, mix_fraction)]


def resolve_scales(
    placement: Placement,
    n_layer: int,
    kind: str,
    alpha: float | None = None,
    beta: float | None = None,
) -> tuple[float, float]:
    """Residual scale and branch init gain for a model: explicit numbers win over the formulas."""
    for label, value in (("deepnorm_alpha", alpha), ("deepnorm_beta", beta)):
        if value is None:
            continue
        if not placement.uses_deepnorm_scales:
            raise ValueError(
                f"{label}={value} has no effect with placement={placement.name}; "
                f"use placement=deepnorm or leave {label} unset"
            )
        if value <= 0:
            raise ValueError(f"{label} must be > 0, got {value}; use a positive number or null")
    a = placement.alpha(n_layer, kind) if alpha is None else float(alpha)
    b = placement.beta(n_layer, kind) if beta is None else float(beta)
    return a, b
