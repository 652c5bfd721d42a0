"""PROBES: name -> what it measures and how it runs; ProbeConfig picks and times them.

Every probe is a registry entry with its own interval (``probes.every.<name>``, in optimizer
steps) and its off-switch (leave it out of ``probes.enabled``). Forward probes share one pass over
the probe batch per step; the others are callbacks of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from lightning.pytorch.callbacks import Callback

from training import metric_names as names
from training.probes.attention import AttnEntropy, MaxAttnLogit
from training.probes.forward import ForwardMeasure, ForwardProbes
from training.probes.gradients import GradNormProbe
from training.probes.measures import ActMax, ActNorm, BlockCos, LogZ, ModelUpdate
from training.probes.sharpness import Sharpness
from training.probes.spikes import LossSpikes
from training.probes.updates import UpdateRatio


@dataclass(frozen=True)
class ProbeSpec:
    every: int  # default interval in optimizer steps
    doc: str
    measure: type[ForwardMeasure] | None = None  # a measure of the shared forward pass, or
    callback: Callable[[int, ProbeConfig, object], Callback] | None = None  # its own callback
    after_forward: bool = False  # its callback runs after the shared forward pass
    default_on: bool = True  # whether a plain run (probes.enabled: null) runs it


PROBES: dict[str, ProbeSpec] = {
    "grad_norm": ProbeSpec(
        1,
        "grad_norm/total, /layer_{i}[/attn|/mlp], /last_fc2",
        callback=lambda every, cfg, batch: GradNormProbe(every),
    ),
    "act_norm": ProbeSpec(10, "act_norm/layer_{i}", ActNorm),
    "update": ProbeSpec(10, names.UPDATE, ModelUpdate),
    "max_logit": ProbeSpec(10, "attn/max_logit[/layer_{i}]", MaxAttnLogit),
    "attn_entropy": ProbeSpec(
        10, "attn/entropy/layer_{i}, attn/entropy_min/layer_{i}", AttnEntropy
    ),
    "act_max": ProbeSpec(10, "act_max/layer_{i}", ActMax),
    "log_z": ProbeSpec(10, "logits/log_z, logits/log_z_rms", LogZ),
    "block_cos": ProbeSpec(10, "block_cos/layer_{i}", BlockCos),
    "update_ratio": ProbeSpec(
        10,
        "update_ratio/layer_{i}, update_ratio/max",
        callback=lambda every, cfg, batch: UpdateRatio(every),
    ),
    "sharpness": ProbeSpec(
        100,
        "sharpness/hessian, sharpness/preconditioned",
        callback=lambda every, cfg, batch: Sharpness(
            every, cfg.sharpness.iters, cfg.batch_size, batch
        ),
        after_forward=True,  # both read theta_s at the step's start
        default_on=False,  # costly: 2 x iters Hessian-vector products
    ),
    "loss_spikes": ProbeSpec(
        10,
        "train/loss_spikes (and loss_spikes in summary.json)",
        callback=lambda every, cfg, batch: LossSpikes(every, cfg.spike_factor, cfg.spike_window),
    ),
}


def default_probes() -> list[str]:
    return [name for name, spec in PROBES.items() if spec.default_on]


@dataclass
class SharpnessConfig:
    iters: int = 20  # power-iteration steps per eigenvalue

    def __post_init__(self) -> None:
        if not isinstance(self.iters, int) or self.iters < 1:
            raise ValueError(f"probes.sharpness.iters must be an integer >= 1, got {self.iters}")


@dataclass
class ProbeConfig:
    """Which probes run and how often. ``every`` overrides PROBES' default intervals by name;
    ``enabled`` None: the registry's default probes."""

    enabled: list[str] | None = None
    every: dict[str, int] = field(default_factory=dict)
    batch_size: int = 8  # samples in the fixed probe batch
    sharpness: SharpnessConfig = field(default_factory=SharpnessConfig)
    spike_factor: float = 1.5  # a loss spike: loss > spike_factor x the running median
    spike_window: int = 100  # steps in that running median

    def __post_init__(self) -> None:
        enabled = default_probes() if self.enabled is None else self.enabled
        self.enabled, self.every = list(enabled), dict(self.every)
        unknown = sorted({n for n in (*self.enabled, *self.every) if n not in PROBES})
        if unknown:
            raise ValueError(f"unknown probe(s) {unknown}; choose from: {', '.join(PROBES)}")
        bad = {n: k for n, k in self.every.items() if not isinstance(k, int) or k < 1}
        if bad:
            raise ValueError(f"probe intervals must be integers >= 1, got {bad}")
        if self.batch_size < 1:
            raise ValueError(f"probes.batch_size must be >= 1, got {self.batch_size}")
        if isinstance(self.sharpness, dict):
            keys = set(self.sharpness) - {"iters"}
            if keys:
                raise ValueError(f"probes.sharpness.{sorted(keys)[0]} is unknown; valid: iters")
            self.sharpness = SharpnessConfig(**self.sharpness)
        if not self.spike_factor > 1.0:
            raise ValueError(f"probes.spike_factor must be > 1, got {self.spike_factor}")
        if not isinstance(self.spike_window, int) or self.spike_window < 1:
            raise ValueError(
                f"probes.spike_window must be an integer >= 1, got {self.spike_window}"
            )

    def interval(self, name: str) -> int:
        return self.every.get(name, PROBES[name].every)


def probe_callbacks(
    probes: ProbeConfig | None = None, probe_batch: torch.Tensor | tuple | None = None
) -> list[Callback]:
    """The probe callbacks for ``probes.enabled`` in registry order (the gradient probe before
    the forward pass), the shared forward pass, then those that run after it."""
    probes = probes or ProbeConfig()
    on = [n for n in PROBES if n in probes.enabled]

    def callbacks_of(after_forward: bool) -> list[Callback]:
        return [
            PROBES[n].callback(probes.interval(n), probes, probe_batch)
            for n in on
            if PROBES[n].callback is not None and PROBES[n].after_forward == after_forward
        ]

    callbacks = callbacks_of(after_forward=False)
    measures = {n: PROBES[n].measure() for n in on if PROBES[n].measure is not None}
    if measures:
        every = {n: probes.interval(n) for n in measures}
        callbacks.append(ForwardProbes(measures, every, probes.batch_size, probe_batch))
    return callbacks + callbacks_of(after_forward=True)


def probe_summary(callbacks: list[Callback]) -> dict:
    """What the probe callbacks add to summary.json (loss_spikes)."""
    out: dict = {}
    for callback in callbacks:
        summary = getattr(callback, "summary", None)
        if callable(summary):
            out.update(summary())
    return out
