"""The fields and checks every model shares: its stack of Blocks, their placement, norm and init.

GPTConfig and ViTConfig inherit BlockConfig and add only what their inputs and outputs need
(vocabulary and context; image, patches and classes); models/gpt.py and models/vit.py build
them. Torch-free (the registries it checks names against are models/catalog.py), so a config is
checked before torch is imported. Every field is keyword-only, so a config
reads the same whichever model it builds. ``placement`` and ``norm`` are sub-configs holding
exactly the keys of their yaml groups (conf/placement/*.yaml, conf/norm/*.yaml); a name alone
stands for the group's defaults: ``GPTConfig(vocab_size=..., placement="deepnorm",
norm=NormConfig(name="dyt", alpha=0.8))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from models.catalog import (
    check_activation,
    check_causal_norm,
    check_init,
    get_connection,
    get_norm,
)
from models.placement import PLACEMENTS, get_placement, takes_hyper

if TYPE_CHECKING:
    from torch import nn

GATE_SHARING = ("layer", "sublayer")
QK_NORM_WIDTHS = ("head", "full")
ATTN_GATES = (None, "headwise", "elementwise")
# Where a model's positions come from: "learned", a position table added to the embeddings;
# "rope", rotary positions in every attention (Su et al. 2021), no table (GPT only).
POSITIONS = ("learned", "rope")
# Parametrizations (models/param.py): how init, multipliers and per-parameter learning rates
# scale with width and depth; "sp" changes nothing.
PARAMETRIZATIONS = ("sp", "mup", "completep")
# The stack's integer fields that must be positive (each model adds its own).
POSITIVE = ("n_layer", "n_head", "n_embd", "mlp_ratio", "streams", "fracs", "sinkhorn_iters")
# A simulated low-precision forward (models/precision.py): every linear layer's
# and every block's output rounded to that format; None: off.
SIM_DTYPES = (None, "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")


@dataclass(kw_only=True)
class PlacementConfig:
    """The placement group: which placement, and the constants some placements take."""

    name: str = "pre"
    alpha: float | None = None  # deepnorm: the residual scale; None: from the depth formula
    beta: float | None = None  # deepnorm: the branch init gain; None: from the depth formula
    mix_fraction: float = 0.25  # mix: share of leading Post-LN layers (Li et al. 2024)
    # rezero: "layer", one gate a per layer for both sub-layers (the paper's "single additional
    # parameter per layer" and its official code's one resweight); "sublayer", one each.
    gates: str = "layer"

    def __post_init__(self) -> None:
        if self.gates not in GATE_SHARING:
            raise ValueError(
                f"placement.gates={self.gates!r}: choose one of {', '.join(GATE_SHARING)}"
            )


@dataclass(kw_only=True)
class NormConfig:
    """The norm group: which norm, and the options norms take (each uses the ones it knows)."""

    name: str = "layernorm"
    eps: float = 1e-5
    alpha: float = 0.5  # dyt, derf: init of the scale a (Zhu et al. 2025)
    # dyt, derf: a's init in the norm before attention; null: alpha. Zhu et al. 2025 init the
    # attention's input norm apart from the others in their LLaMA runs (0.8 and 0.2 at 7B)
    alpha_attn: float | None = None
    groups: int = 8  # groupnorm: groups over n_embd, must divide it

    def build(self, dim: int, name: str | None = None, attn_input: bool = False) -> nn.Module:
        """This norm (or the registry's ``name``, e.g. its per-head norm) over ``dim`` features;
        ``attn_input``: the norm in front of the attention, which takes ``alpha_attn``."""
        opts = self.options()
        if attn_input and self.alpha_attn is not None:
            opts["alpha"] = self.alpha_attn
        return get_norm(name or self.name)(dim, self.eps, **opts)

    def check(self, dim: int) -> None:
        """Refuse a name or options this norm would refuse over ``dim`` features (torch-free)."""
        get_norm(self.name).check_options(dim, **self.options())
        attn = self.alpha if self.alpha_attn is None else self.alpha_attn
        try:  # alpha_attn as the attention input's alpha; its message names alpha_attn
            get_norm(self.name).check_options(dim, **{**self.options(), "alpha": attn})
        except ValueError as err:
            raise ValueError(str(err).replace("norm.alpha ", "norm.alpha_attn ", 1)) from None

    def options(self) -> dict[str, Any]:
        """Every option field; each norm takes the ones its NormSpec.options names (a new
        option is one field here and one keyword of the norm that reads it)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("name", "eps")}


@dataclass(kw_only=True)
class ParamConfig:
    """The parametrization group (models/param.py has the rules and their sources): muP and
    CompleteP are written relative to a base shape at which they equal SP exactly, with the
    width multiplier m_N = n_embd / base_width and the depth multiplier m_L = n_layer /
    base_depth. None: the model's own width or depth (a multiplier of 1)."""

    name: str = "sp"
    base_width: int | None = None  # mup, completep: the width the learning rate was tuned at
    base_depth: int | None = None  # completep: the depth the learning rate was tuned at
    alpha: float = 1.0  # completep: the branch multiplier m_L^-alpha; 1 CompleteP, 0.5 depth-muP

    def __post_init__(self) -> None:
        if self.name not in PARAMETRIZATIONS:
            raise ValueError(f"param={self.name!r}: choose one of {', '.join(PARAMETRIZATIONS)}")
        for key in ("base_width", "base_depth"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"param.{key} must be a positive integer or null, got {value!r}")
        if not 0.5 <= self.alpha <= 1.0:
            raise ValueError(
                f"param.alpha={self.alpha}: CompleteP's branch exponent lies in [0.5, 1] "
                "(1: CompleteP, 0.5: depth-muP)"
            )

    @property
    def scales_width(self) -> bool:
        return self.name in ("mup", "completep")

    @property
    def scales_depth(self) -> bool:
        return self.name == "completep"

    def width_mult(self, n_embd: int) -> float:
        """m_N: 1 under SP or without a base width."""
        return n_embd / self.base_width if self.scales_width and self.base_width else 1.0

    def depth_mult(self, n_layer: int) -> float:
        """m_L: 1 but under CompleteP with a base depth."""
        return n_layer / self.base_depth if self.scales_depth and self.base_depth else 1.0

    def attn_scale(self, n_embd: int, n_head: int) -> float | None:
        """The attention logits' scale: None (SP's 1 / sqrt(d_h)) or muP's sqrt(b_h) / d_h,
        b_h the head size at the base width: 1 / d_h in width, SP's at the base."""
        if not self.scales_width:
            return None
        base_head = (self.base_width or n_embd) / n_head
        return base_head**0.5 / (n_embd / n_head)

    def output_mult(self, n_embd: int) -> float:
        """The multiplier on the output logits: 1 / m_N."""
        return 1.0 / self.width_mult(n_embd)

    def branch_mult(self, n_layer: int) -> float:
        """The multiplier on each residual branch: m_L^-alpha."""
        return self.depth_mult(n_layer) ** -self.alpha


def group_config(cls: type, value: Any) -> Any:
    """A group's sub-config from itself, its name alone, or its fields as a dict."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        return cls(name=value)
    if isinstance(value, dict):
        return cls(**value)
    raise TypeError(f"{cls.__name__} expected, or a name; got {value!r}")


@dataclass(kw_only=True)
class BlockConfig:
    n_layer: int = 6
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    norm: NormConfig = field(default_factory=NormConfig)
    param: ParamConfig = field(default_factory=ParamConfig)
    init: str = "xavier"
    mlp_ratio: int = 4
    qk_norm: bool = False  # normalize each head's q and k (Wortsman et al. 2023)
    # what qk_norm normalizes over: "head", each head's q and k (Wortsman et al. 2023); "full",
    # q and k over the whole width before the head split (OLMo 2, Groeneveld/OLMo Team 2024)
    qk_norm_width: str = "head"
    pos: str = "learned"  # POSITIONS
    weight_norm: bool = False  # w = g * v / ||v|| on the block Linears (Salimans & Kingma 2016)
    # w = gamma * w / sigma(w) on the block Linears, sigma by power iteration (Zhai et al. 2023)
    sigma_reparam: bool = False
    # QK-clip (Kimi K2): after each step, heads whose max logit passed this tau get W_q and W_k
    # scaled by sqrt(tau / max) (models/qk_clip.py; Kimi K2: 100); None: off
    qk_clip: float | None = None
    activation: str = "gelu"  # the MLP's: gelu | gelu_tanh (GPT-2's) | relu
    # soft-capping, c * tanh(x / c): each attention logit (Gemma 2: 50) and each output logit
    # (Gemma 2: 30); None: off
    attn_softcap: float | None = None
    logit_softcap: float | None = None
    # gated attention (Qiu et al. 2025): the attention's output times sigmoid(x W_g), x its
    # input; "headwise": one gate per head, "elementwise": one per feature; None: off
    attn_gate: str | None = None
    # how each branch meets the stream (models/connections.py): residual, the placement's own
    # sum; hc | shc, hyper-connections over n streams (Zhu et al. 2025, dynamic | static); mhc,
    # manifold-constrained (Xie et al. 2025); fracs > 1 splits the width into that many
    # fractions (frac-connections, Zhu et al. 2025b)
    connection: str = "residual"
    streams: int = 1  # n, the residual streams (Zhu et al.: 4)
    fracs: int = 1  # m, the fractions of the width
    sinkhorn_iters: int = 20  # mhc: Sinkhorn-Knopp rounds on H_res (Xie et al.: 20)
    stream_noise: float | None = None  # N(0, s^2) on each stream's B0 at init (connections.py)
    # a simulated low-precision forward: each linear layer's and block's output rounded to
    # SIM_DTYPES' format (straight-through: gradients as if unrounded); None: off
    sim_dtype: str | None = None

    # Set by each model: whether its attention is causal (a causal model refuses norms whose
    # statistics span tokens), and the integer fields that must be positive besides the stack's.
    causal: ClassVar[bool] = False
    positive_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.placement = group_config(PlacementConfig, self.placement)
        self.norm = group_config(NormConfig, self.norm)
        self.param = group_config(ParamConfig, self.param)
        if self.pos not in POSITIONS:
            raise ValueError(f"model.pos={self.pos!r}: choose one of {', '.join(POSITIONS)}")
        if self.pos == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError(
                f"model.pos=rope rotates pairs of a head's features: n_embd / n_head = "
                f"{self.n_embd // self.n_head} is odd; pick an even head size"
            )
        if self.qk_norm_width not in QK_NORM_WIDTHS:
            raise ValueError(
                f"model.qk_norm_width={self.qk_norm_width!r}: choose one of "
                f"{', '.join(QK_NORM_WIDTHS)}"
            )
        for name in (*self.positive_fields, *POSITIVE):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
        self.check_model()
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}; "
                "pick n_embd as a multiple of n_head"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.attn_gate not in ATTN_GATES:
            raise ValueError(
                f"model.attn_gate={self.attn_gate!r}: choose headwise, elementwise or null (off)"
            )
        if self.sim_dtype not in SIM_DTYPES:
            raise ValueError(
                f"model.sim_dtype={self.sim_dtype!r}: choose one of "
                f"{', '.join(d for d in SIM_DTYPES if d)} or null (off)"
            )
        for name in ("attn_softcap", "logit_softcap"):
            cap = getattr(self, name)
            if cap is not None and not cap > 0:
                raise ValueError(f"model.{name} must be > 0 or null (off), got {cap}")
        self.check_param()
        self.check_qk_clip()
        self.check_connection()
        if self.sigma_reparam and (self.weight_norm or self.param.name != "sp"):
            raise ValueError(
                "model.sigma_reparam=true reparametrizes the same weights as "
                + ("model.weight_norm: set one of them false" if self.weight_norm else
                   f"param={self.param.name}'s per-parameter rules expect: use param=sp")
            )  # fmt: skip
        if self.norm.eps <= 0:
            raise ValueError(f"norm.eps must be > 0, got {self.norm.eps}")
        fraction = self.placement.mix_fraction
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"placement.mix_fraction must be in [0, 1], got {fraction}")
        if self.causal:
            check_causal_norm(self.norm.name)
        self.norm.check(self.n_embd)
        check_init(self.init)
        check_activation(self.activation)
        get_placement(self.placement.name).check(self)

    def check_model(self) -> None:
        """The model's own checks, after its integers and before the stack's other fields."""

    def check_qk_clip(self) -> None:
        """QK-clip edits W_q and W_k: the logits must follow them, and the weights be plain."""
        if self.qk_clip is None:
            return
        if not self.qk_clip > 0:
            raise ValueError(f"model.qk_clip must be > 0 or null (off), got {self.qk_clip}")
        placement = get_placement(self.placement.name)
        if self.qk_norm or placement.qkv_norm or placement.block != "residual":
            raise ValueError(
                "model.qk_clip rescales W_q and W_k, and normalized q and k do not follow them: "
                "set model.qk_norm=false (and a placement without its own q, k norm)"
            )
        if self.weight_norm or self.sigma_reparam:
            raise ValueError(
                "model.qk_clip edits W_q and W_k directly; model.weight_norm and "
                "model.sigma_reparam reparametrize them: set those false"
            )

    def check_connection(self) -> None:
        """A hyper-connection replaces the residual sum of a placement with no norm after it."""
        spec = get_connection(self.connection)
        if not spec.hyper:
            if (self.streams, self.fracs) != (1, 1):
                raise ValueError(
                    f"model.streams={self.streams}, model.fracs={self.fracs}: more streams or "
                    "fractions need a hyper-connection; set model.connection=hc (or shc, mhc)"
                )
            if self.stream_noise:
                raise ValueError("model.stream_noise needs several streams: model.connection=mhc")
            return
        if self.n_embd % self.fracs:
            raise ValueError(
                f"model.fracs={self.fracs} does not divide model.n_embd={self.n_embd}; "
                "pick a divisor"
            )
        if spec.manifold and self.fracs != 1:
            raise ValueError(f"model.connection={spec.name} takes one fraction: set model.fracs=1")
        if spec.lite and not 2 <= self.streams <= 5:
            raise ValueError("model.connection=mhc_lite mixes n! permutations: model.streams 2-5")
        if self.stream_noise is not None and not self.stream_noise >= 0:
            raise ValueError(f"model.stream_noise must be >= 0 or null, got {self.stream_noise}")
        if not takes_hyper(get_placement(self.placement.name)):
            fits = ", ".join(name for name, p in PLACEMENTS.items() if takes_hyper(p))
            raise ValueError(
                f"model.connection={self.connection} replaces the plain residual sum, and "
                f"placement={self.placement.name} normalizes or scales it: use one of "
                f"placement={fits}"
            )
        if self.param.name != "sp":
            raise ValueError(
                f"model.connection={self.connection} with param={self.param.name}: normlab has "
                "no width or depth rule for the connection's coefficients; use param=sp"
            )

    def check_param(self) -> None:
        """A parametrization this stack can take (models/param.py says why nGPT cannot)."""
        param = self.param
        if param.name == "sp":
            return
        if self.placement.name == "ngpt":
            raise ValueError(
                f"param={param.name} with placement=ngpt: nGPT keeps its weights on the unit "
                "sphere and scales them with its own eigen learning rates; use param=sp"
            )
        if param.base_width is not None and param.base_width % self.n_head:
            raise ValueError(
                f"param.base_width={param.base_width} is not divisible by model.n_head="
                f"{self.n_head}; pick a base width that is a multiple of n_head"
            )
        if param.scales_depth and self.init == "gpt2":  # Dey et al. 2025, Table 1
            raise ValueError(
                "init=gpt2 divides out_proj and fc2 by sqrt(2 n_layer), a depth scaling "
                "CompleteP's branch multiplier replaces: use init=xavier (or ds) with "
                "param=completep"
            )


@dataclass(kw_only=True)
class GPTConfig(BlockConfig):
    vocab_size: int = 256
    block_size: int = 128  # context length
    tie_weights: bool = True
    # Takase et al. 2023 ("Spike No More"): the token embeddings times sqrt(n_embd) ("Scaled
    # Embed"), and a norm of the model's kind on the embeddings, positions added ("Embed LN")
    emb_scale: bool = False
    emb_norm: bool = False
    # a learnable scalar on the summed embeddings, init sqrt(n_embd): DyT's LLaMA code and Derf's
    # nanoGPT patch run their norm-free language models with it (without, a tanh or erf norm
    # passes the 0.02-scale embeddings on 50x smaller than LayerNorm would)
    emb_gain: bool = False

    causal: ClassVar[bool] = True
    positive_fields: ClassVar[tuple[str, ...]] = ("vocab_size", "block_size")

    def check_model(self) -> None:
        if self.emb_gain and self.emb_scale:
            raise ValueError(
                "model.emb_gain and model.emb_scale both scale the embeddings by sqrt(n_embd) "
                "(learnable and fixed): set one of them false"
            )


POOLS = ("cls", "mean")


@dataclass(kw_only=True)
class ViTConfig(BlockConfig):
    image_size: int = 8
    patch_size: int = 2
    in_chans: int = 1
    num_classes: int = 10
    pool: str = "cls"
    tie_weights: bool = False  # the GPT's option; the ViT's head is always its own

    positive_fields: ClassVar[tuple[str, ...]] = (
        "image_size",
        "patch_size",
        "in_chans",
        "num_classes",
    )

    def check_model(self) -> None:
        if self.tie_weights:
            raise ValueError(
                "model.tie_weights=true: the ViT has no token embedding to tie its head to; "
                "set model.tie_weights=false"
            )
        if self.image_size % self.patch_size != 0:
            raise ValueError(
                f"model.image_size={self.image_size} is not divisible by "
                f"model.patch_size={self.patch_size}; pick a patch size that divides it"
            )
        if self.pool not in POOLS:
            raise ValueError(f"unknown pool '{self.pool}'; choose one of: {', '.join(POOLS)}")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2
