"""The optimizer's config, torch-free: OptimConfig, the learning-rate schedules (SCHEDULES,
lr_multiplier) and which optimizers exist with the keys each reads (OPTIMIZER_KEYS; built by
training/optim.py). A config is checked against it before torch is imported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.checks import node_to
from runs.errors import ConfigError

# The keys every optimizer reads (the schedule, decay and loss settings), and each optimizer's
# own: a key the chosen optimizer does not read is refused before training (read_optim, below),
# never recorded as if it changed something.
SCHEDULE_KEYS = (
    "name", "lr", "weight_decay", "warmup_steps", "schedule", "min_lr_ratio", "strict_warmup",
    "z_loss", "independent_wd", "guards", "emb_lr_mult", "readout_lr_mult", "hidden_lr_mult",
    "spike_at", "spike_steps", "spike_factor",
)  # fmt: skip
LR_MULTS = ("emb_lr_mult", "readout_lr_mult", "hidden_lr_mult")  # by role, training/optim.py
SPIKE = ("spike_at", "spike_steps", "spike_factor")  # a spike made on purpose (lr_multiplier)
SPIKE_STEPS, SPIKE_FACTOR = 10, 10.0  # when spike_at is set and these are left null
GUARD_NAMES = ("skip_step", "clip_update", "zclip")  # training/guards.py
OPTIMIZER_KEYS: dict[str, tuple[str, ...]] = {
    "adamw": ("betas", "eps", "fused"),
    "sgd": ("momentum", "nesterov"),
    "adafactor": (),  # torch's defaults for its decay rate and eps
    "muon": ("momentum", "nesterov", "betas", "eps", "fused"),  # betas, eps, fused: its AdamW half
    "adam_atan2": ("betas",),  # no eps: atan2 bounds the step (training/optim.py)
}


def cosine_multiplier(progress: float, min_lr_ratio: float) -> float:
    """Half a cosine from 1 down to ``min_lr_ratio`` as progress goes 0 -> 1."""
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant_multiplier(progress: float, min_lr_ratio: float) -> float:
    return 1.0


WSD_DECAY = 0.2  # the share of the post-warmup steps that wsd spends decaying


def wsd_multiplier(progress: float, min_lr_ratio: float) -> float:
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM): 1 until the last WSD_DECAY of the run,
    then a straight line down to ``min_lr_ratio`` at progress 1."""
    start = 1.0 - WSD_DECAY
    if progress <= start:
        return 1.0
    return 1.0 - (1.0 - min_lr_ratio) * (progress - start) / WSD_DECAY


# Schedule after warmup: (progress in [0, 1], min_lr_ratio) -> lr multiplier.
SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "cosine": cosine_multiplier,
    "constant": constant_multiplier,
    "wsd": wsd_multiplier,
}


@dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 0
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    strict_warmup: bool = False  # refuse (not clamp) a warmup longer than the run
    z_loss: float = 0.0  # coefficient of mean(log Z^2) added to the loss (z_loss_term)
    # Wortsman et al. 2023's independent weight decay: each step shrinks the weights by
    # weight_decay x the schedule's multiplier, not x the lr (torch's AdamW: lr x weight_decay).
    independent_wd: bool = False
    momentum: float = 0.9  # sgd, muon
    nesterov: bool = False  # sgd, muon
    # AdamW's (and Muon's AdamW half's) fused step: None, on a GPU only (the CPU takes torch's
    # foreach step); true, on the CPU too (about 3x faster a step at the findings' sizes, the
    # results move in the last digits: an opt-in, docs/benchmarks.md); false, never.
    fused: bool | None = None
    # guards around the step, the spike interventions (training/guards.py): skip_step
    # (OLMo-core's 6-sigma skip), clip_update (Levanter's 3-sigma update-norm clipping)
    guards: list[str] = dataclasses.field(default_factory=list)
    # the lr of each role's parameters times this (Kalra & Barkeshli 2026: SP's embedding lr
    # raised by the width factor transfers like muP): the input embeddings, the readout, every
    # other parameter; None: 1
    emb_lr_mult: float | None = None
    readout_lr_mult: float | None = None
    hidden_lr_mult: float | None = None
    # a loss spike made on purpose: from step spike_at on, spike_steps steps (null: 10) at the
    # schedule's lr x spike_factor (null: 10); spike_at null: none
    spike_at: int | None = None
    spike_steps: int | None = None
    spike_factor: float | None = None

    def read(self) -> dict:
        """The settings this config's optimizer reads (what a run records as its optim)."""
        keys = (*SCHEDULE_KEYS, *OPTIMIZER_KEYS.get(self.name, ()))
        unset = () if self.guards else ("guards",)  # a run without guards records none
        unset += tuple(k for k in (*LR_MULTS, *SPIKE) if getattr(self, k) is None)  # nor unset
        return {k: v for k, v in dataclasses.asdict(self).items() if k in keys and k not in unset}

    @property
    def lr_mults(self) -> dict[str, float]:
        """role -> its lr multiplier (1 where unset)."""
        return {k.split("_")[0]: getattr(self, k) or 1.0 for k in LR_MULTS}

    @property
    def decay_per_lr(self) -> float:
        """The weight_decay torch's AdamW gets: it multiplies it by the step's lr."""
        return self.weight_decay / self.lr if self.independent_wd else self.weight_decay

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)  # a YAML list arrives as a list
        if self.name not in OPTIMIZER_KEYS:
            raise ValueError(
                f"unknown optimizer '{self.name}'; choose one of: {', '.join(OPTIMIZER_KEYS)}"
            )
        self.guards = list(self.guards)
        if len(set(self.guards)) < len(self.guards):
            twice = sorted({g for g in self.guards if self.guards.count(g) > 1})
            raise ValueError(
                f"optim.guards names {', '.join(twice)} twice; each guard acts once per step: "
                f"optim.guards=[{','.join(dict.fromkeys(self.guards))}]"
            )
        unknown = [g for g in self.guards if g not in GUARD_NAMES]
        if unknown:
            raise ValueError(
                f"unknown optim.guards {unknown}; choose from: {', '.join(GUARD_NAMES)}"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"unknown optim.schedule '{self.schedule}'; choose one of: {', '.join(SCHEDULES)}"
            )
        for key in LR_MULTS:
            value = getattr(self, key)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"optim.{key} must be > 0 or null (1), got {value!r}")
        if self.spike_at is None and (self.spike_steps, self.spike_factor) != (None, None):
            raise ValueError("optim.spike_steps and spike_factor act from optim.spike_at: set it "
                             "(e.g. optim.spike_at=150), or leave them null")  # fmt: skip
        spike = {"spike_at": self.spike_at, "spike_steps": self.spike_steps}  # integers
        for key, value in spike.items():
            least = 1 if key == "spike_steps" else 0
            if value is not None and not (isinstance(value, int | float) and value >= least
                                          and value == int(value)):  # fmt: skip
                raise ValueError(
                    f"optim.{key} must be an integer >= {least} or null, got {value!r}"
                )
        factor = self.spike_factor
        if factor is not None and not (isinstance(factor, int | float) and factor > 0):
            raise ValueError(f"optim.spike_factor must be a number > 0 or null, got {factor!r}")
        if not self.z_loss >= 0.0:
            raise ValueError(f"optim.z_loss must be >= 0 (0 turns it off), got {self.z_loss}")
        numbers = {"lr": self.lr, "weight_decay": self.weight_decay, "eps": self.eps,
                   "betas": self.betas, "min_lr_ratio": self.min_lr_ratio,
                   "momentum": self.momentum}  # fmt: skip
        for key, value in numbers.items():
            if not all(math.isfinite(v) for v in (value if key == "betas" else (value,))):
                raise ValueError(f"optim.{key} must be a finite number, got {value}")
        ranges = (
            ("weight_decay", self.weight_decay >= 0.0, ">= 0"),
            ("eps", self.eps > 0.0, "> 0"),
            ("betas", all(0.0 <= b < 1.0 for b in self.betas) and len(self.betas) == 2,
             "two values in [0, 1)"),
            ("momentum", 0.0 <= self.momentum < 1.0, "in [0, 1)"),
        )  # fmt: skip
        for key, ok, rule in ranges:
            if not ok and key in (*SCHEDULE_KEYS, *OPTIMIZER_KEYS.get(self.name, ())):
                raise ValueError(f"optim.{key} must be {rule}, got {getattr(self, key)}")
        if self.lr <= 0 or self.warmup_steps < 0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(
                f"optim needs lr > 0, warmup_steps >= 0 and 0 <= min_lr_ratio <= 1; got "
                f"lr={self.lr}, warmup_steps={self.warmup_steps}, min_lr_ratio={self.min_lr_ratio}"
            )


def lr_multiplier(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """LR multiplier at optimizer step ``step`` (0-based).

    Warmup: (step + 1) / warmup_steps for step < warmup_steps, so the first step already moves.
    Then the schedule at progress (step - warmup_steps) / (total_steps - warmup_steps), clamped.
    """
    return spiked(step, cfg) * scheduled(step, cfg, total_steps)


def scheduled(step: int, cfg: OptimConfig, total_steps: int) -> float:
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    return SCHEDULES[cfg.schedule](min(1.0, max(0.0, progress)), cfg.min_lr_ratio)


def spiked(step: int, cfg: OptimConfig) -> float:
    """The spike protocol's factor at ``step``: spike_factor for spike_steps steps from
    spike_at (a learning-rate jump, as the spike literature makes spikes happen), else 1."""
    if cfg.spike_at is None:
        return 1.0
    steps = cfg.spike_steps if cfg.spike_steps is not None else SPIKE_STEPS
    inside = cfg.spike_at <= step < cfg.spike_at + steps
    return (cfg.spike_factor if cfg.spike_factor is not None else SPIKE_FACTOR) if inside else 1.0


def read_optim(node: Any, warmup_steps: int) -> OptimConfig:
    """optim's node as its dataclass; a key the chosen optimizer does not read is refused."""
    name = node.get("name")
    if name in OPTIMIZER_KEYS:
        reads = (*SCHEDULE_KEYS, *OPTIMIZER_KEYS[name])
        fields = {f.name for f in dataclasses.fields(OptimConfig)}
        unread = [k for k in node if k not in reads and k in fields]
        if unread:
            users = [n for n, keys in OPTIMIZER_KEYS.items() if unread[0] in keys]
            raise ConfigError(
                f"optim.{unread[0]} is not read by optim={name} (it reads "
                f"{', '.join(OPTIMIZER_KEYS[name]) or 'only the schedule keys'} besides the "
                f"schedule keys); drop it{', or use optim=' + '/'.join(users) if users else ''}"
            )
    optim = node_to(OptimConfig, node, "optim")
    return dataclasses.replace(optim, warmup_steps=warmup_steps)
