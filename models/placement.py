"""Where the norms sit in a residual block, expressed as data.

One residual sub-layer (attention or MLP) computes

    y = Post( alpha * x + BranchOut( F( Pre(x) ) ) )

Each placement says which of the three slots hold a norm (the others are identities), how the
residual scale alpha and the branch init gain beta follow from the depth, and whether a final
norm follows the last block. The Block in layers.py reads this record; it never branches on a
placement's name.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Placement:
    """Norm slots of one residual sub-layer, plus the depth rules for alpha and beta."""

    name: str
    pre: bool  # norm on the branch input
    branch_out: bool  # norm on the branch output, before the residual add
    post: bool  # norm after the residual add
    final_norm: bool  # one more norm after the last block
    alpha: Callable[[int, str], float] = unit_scale  # residual scale from (n_layer, kind)
    beta: Callable[[int, str], float] = unit_scale  # init gain of v, out, fc1, fc2
    paper: str = ""

    @property
    def uses_deepnorm_scales(self) -> bool:
        return self.alpha is not unit_scale or self.beta is not unit_scale


PLACEMENTS: dict[str, Placement] = {
    p.name: p
    for p in (
        Placement(
            "post", pre=False, branch_out=False, post=True, final_norm=False, paper="Vaswani 2017"
        ),
        Placement(
            "pre", pre=True, branch_out=False, post=False, final_norm=True, paper="Xiong 2020"
        ),
        Placement(
            "deepnorm",
            pre=False,
            branch_out=False,
            post=True,
            final_norm=False,
            alpha=deepnorm_alpha,
            beta=deepnorm_beta,
            paper="Wang 2022",
        ),
    )
}


def get_placement(name: str) -> Placement:
    if name not in PLACEMENTS:
        raise ValueError(
            f"unknown placement '{name}'; choose one of: {', '.join(sorted(PLACEMENTS))}"
        )
    return PLACEMENTS[name]


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
