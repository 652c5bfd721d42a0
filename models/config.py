"""The fields and checks every model shares: its stack of Blocks, their placement, norm and init.

GPTConfig and ViTConfig inherit BlockConfig and add only what their inputs and outputs need
(vocabulary and context; image, patches and classes). Every field is keyword-only, so a config
reads the same whichever model it builds: ``GPTConfig(vocab_size=..., n_layer=..., norm=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.activations import get_activation
from models.init import check_init
from models.norms import build_norm, check_causal_norm
from models.placement import get_placement


@dataclass(kw_only=True)
class BlockConfig:
    n_layer: int = 6
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    placement: str = "pre"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    init: str = "xavier"
    mlp_ratio: int = 4
    deepnorm_alpha: float | None = None  # None: from the depth formula
    deepnorm_beta: float | None = None
    mix_fraction: float = 0.25  # placement=mix: share of leading Post-LN layers (Li et al. 2024)
    dyt_alpha: float = 0.5  # norm=dyt: init of the tanh scale a (Zhu et al. 2025)
    norm_groups: int = 8  # norm=groupnorm: groups over n_embd, must divide it
    qk_norm: bool = False  # normalize each head's q and k (Wortsman et al. 2023)
    weight_norm: bool = False  # w = g * v / ||v|| on the block Linears (Salimans & Kingma 2016)
    activation: str = "gelu"  # the MLP's: gelu | gelu_tanh (GPT-2's) | relu

    # Set by each model: whether its attention is causal (a causal model refuses norms whose
    # statistics span tokens), and the integer fields that must be positive besides the stack's.
    causal: ClassVar[bool] = False
    positive_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in (*self.positive_fields, "n_layer", "n_head", "n_embd", "mlp_ratio"):
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
        if self.norm_eps <= 0:
            raise ValueError(f"norm.eps must be > 0, got {self.norm_eps}")
        if not 0.0 <= self.mix_fraction <= 1.0:
            raise ValueError(f"placement.mix_fraction must be in [0, 1], got {self.mix_fraction}")
        if self.causal:
            check_causal_norm(self.norm)
        build_norm(self.norm, self.n_embd, self.norm_eps, **self.norm_opts)  # bad options fail here
        check_init(self.init)
        get_activation(self.activation)
        get_placement(self.placement).check(self)

    def check_model(self) -> None:
        """The model's own checks, after its integers and before the stack's other fields."""

    @property
    def norm_opts(self) -> dict[str, float]:
        """Options every norm receives; each takes the ones it understands."""
        return {"alpha": self.dyt_alpha, "groups": self.norm_groups}
