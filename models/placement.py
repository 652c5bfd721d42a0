"""Where the norms sit in a residual block, expressed as data.

One residual sub-layer (attention or MLP) computes

    y = Post( Residual( BranchOut( F( Pre(x) ) ), x ) [+ s * x0] ),   Residual(b, x) = b + w * x

Each placement says what each of the three slots holds (the model's norm, nothing, or ReZero's
learnable gate) for the attention and the MLP sub-layer, what weighs the skip (w = alpha, a
constant from the depth, or Admin's learnable per-feature omega), how alpha and the branch init
gain beta follow from the depth, the weight s of the block input x0 in the MLP sub-layer's sum
(B2T's extra skip; 0 elsewhere), a per-layer factor on the slot norms' outputs (LayerNorm
Scaling), whether the attention normalizes q, k and v (HybridNorm), whether a final norm follows
the last block, which block computes the layer (nGPT's is its own, models/ngpt.py), which model
options it refuses, and, for Mix-LN, which placement each layer uses. The Block in layers.py
reads this record; it never branches on a placement's name.
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


def inverse_sqrt_depth(layer: int) -> float:
    """1 / sqrt(l) for layer l (1-based): LayerNorm Scaling's factor, DS-Init's gain."""
    return layer**-0.5


# What a norm slot of a sub-layer holds (layers.SLOTS builds each): nothing, the model's norm, or
# a learnable scalar gate on the branch (ReZero's residual weight, init 0).
SLOT_KINDS = ("none", "norm", "gate")
# What weighs the skip x in the residual sum (layers.RESIDUALS): the constant alpha, or Admin's
# learnable per-feature omega, set by profiling one forward pass at init.
RESIDUAL_KINDS = ("scale", "omega")
# Which block computes a layer (stack.BLOCK_KINDS): the residual Block of layers.py, or nGPT's
# normalized block (models/ngpt.py) whose states and weights live on the unit sphere.
BLOCK_KINDS = ("residual", "normalized")
Slots = tuple[str, str, str]  # (pre, branch_out, post)


@dataclass(frozen=True)
class Placement:
    """Slots of the two residual sub-layers, the skip's weight, the B2T skip, the depth rules for
    alpha, beta and the norms' scale, the block kind, refused options, and, for placements that
    differ by layer, the rule that names each layer's placement."""

    name: str
    pre: str = "none"  # slot on the branch input
    branch_out: str = "none"  # slot on the branch output, before the residual add
    post: str = "none"  # slot after the residual add
    mlp: Slots | None = None  # the MLP sub-layer's (pre, branch_out, post); None: as attention's
    residual: str = "scale"  # RESIDUAL_KINDS: what weighs the skip
    final_norm: bool = False  # one more norm after the last block
    # Weight of the block's input in the MLP sub-layer's residual sum (B2T: 1, others: 0).
    input_skip: float = 0.0
    alpha: Callable[[int, str], float] = unit_scale  # residual scale from (n_layer, kind)
    beta: Callable[[int, str], float] = unit_scale  # init gain of v, out, fc1, fc2
    # Layer l (1-based) -> factor on the output of each slot norm in it; None: no factor.
    norm_scale: Callable[[int], float] | None = None
    qkv_norm: bool = False  # the attention normalizes each head's q, k and v
    block: str = "residual"  # BLOCK_KINDS
    # (model config field, value, why and the fix): combinations the model refuses to build.
    refuses: tuple[tuple[str, object, str], ...] = ()
    # (n_layer, mix_fraction) -> one placement name per layer; None: every layer is this one.
    layers: Callable[[int, float], list[str]] | None = None
    paper: str = ""

    def __post_init__(self) -> None:
        for slot in (*self.attn_slots, *self.mlp_slots):
            if slot not in SLOT_KINDS:
                raise ValueError(f"unknown slot kind '{slot}'; choose one of: {SLOT_KINDS}")
        for value, kinds in ((self.residual, RESIDUAL_KINDS), (self.block, BLOCK_KINDS)):
            if value not in kinds:
                raise ValueError(f"unknown kind '{value}'; choose one of: {kinds}")

    @property
    def attn_slots(self) -> Slots:
        return self.pre, self.branch_out, self.post

    @property
    def mlp_slots(self) -> Slots:
        return self.attn_slots if self.mlp is None else self.mlp

    def check(self, model_cfg: object) -> None:
        """Refuse the model options this placement cannot honour, naming the fix."""
        alpha_attn = getattr(getattr(model_cfg, "norm", None), "alpha_attn", None)
        if alpha_attn is not None and self.layers is None and self.pre == "none":
            raise ValueError(
                f"norm.alpha_attn sets the norm in front of the attention, and placement="
                f"{self.name} has none there: drop norm.alpha_attn, or use a placement with one "
                "(pre, sandwich, ...)"
            )
        for field, value, fix in self.refuses:
            if getattr(model_cfg, field, None) == value:  # a field the model has (emb_gain: GPT)
                shown = str(value).lower() if isinstance(value, bool) else value
                raise ValueError(
                    f"model.{field}={shown} does not combine with placement={self.name}: {fix}"
                )

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
        # Post-LN whose skip is weighted per feature by omega, from one profiling pass at init.
        Placement("admin", post="norm", residual="omega", paper="Liu 2020"),
        # Pre-LN whose norm outputs in layer l are scaled by 1/sqrt(l); the final norm is not.
        Placement(
            "lns", pre="norm", final_norm=True, norm_scale=inverse_sqrt_depth, paper="Sun 2025"
        ),
        # The norm on the branch output only; the stream itself is never normalized, so a final
        # norm follows (OLMo 2 keeps one).
        Placement("reorder", branch_out="norm", final_norm=True, paper="OLMo 2, 2024"),
        # As the official code computes it: h = Norm(x + Attn_qkvnorm(x)); y = h + FFN(h), i.e.
        # the FFN sub-layer is FFN(Norm(Y)) + Norm(Y); the last FFN's sum is not normalized.
        Placement(
            "hybrid",
            post="norm",
            mlp=("none", "none", "none"),
            qkv_norm=True,
            final_norm=True,
            refuses=(
                ("qk_norm", True, "it normalizes q, k and v itself; set model.qk_norm=false"),
            ),
            paper="Zhuo 2025",
        ),
        # nGPT: its own block on the unit sphere (models/ngpt.py), no norm slots, no final norm;
        # the model's norm is not used.
        Placement(
            "ngpt",
            block="normalized",
            refuses=(
                ("qk_norm", True, "it normalizes q and k itself; set model.qk_norm=false"),
                (
                    "weight_norm",
                    True,
                    "its weights are renormalized to unit norm; set model.weight_norm=false",
                ),
                (
                    "sigma_reparam",
                    True,
                    "its weights are renormalized to unit norm; set model.sigma_reparam=false",
                ),
                (
                    "init",
                    "ds",
                    "its weights are normalized, so a scaled init is lost; use model.init=xavier",
                ),
                (
                    "emb_gain",
                    True,
                    "its embeddings are normalized, so a gain on them is lost; set "
                    "model.emb_gain=false",
                ),
            ),
            paper="Loshchilov 2024",
        ),
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
    for label, value in (("placement.alpha", alpha), ("placement.beta", beta)):
        if value is None:
            continue
        if not placement.uses_deepnorm_scales:
            raise ValueError(
                f"{label}={value} has no effect with placement={placement.name}; "
                f"use placement=deepnorm or leave {label} unset (null)"
            )
        if value <= 0:
            raise ValueError(f"{label} must be > 0, got {value}; use a positive number or null")
    a = placement.alpha(n_layer, kind) if alpha is None else float(alpha)
    b = placement.beta(n_layer, kind) if beta is None else float(beta)
    return a, b


def takes_hyper(placement: Placement) -> bool:
    """Whether a hyper-connection can replace this placement's residual sums: a residual block,
    the same in every layer, no norm after the sum, and a plain unit skip."""
    return (
        placement.block == "residual"
        and placement.layers is None
        and placement.attn_slots[2] == placement.mlp_slots[2] == "none"
        and placement.residual == "scale"
        and not placement.uses_deepnorm_scales
        and placement.input_skip == 0
    )
