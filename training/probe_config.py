"""Which probes exist and how a run configures them, torch-free: PROBES (name -> ProbeSpec: its
default interval, what it logs, and the measure or callback of training/probes/ that computes
it, by name) and ProbeConfig (``probes.*``), so the config is checked before torch is imported.
training/probes/registry.py builds the callbacks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runs import metric_names as names

# the smallest spike_sigma_window that ever scores: the score needs 20 values, this step's and
# 19 before it (max(20, window // 2): training/probes/spikes.py, OLMo-core's rule)
SCORE_FROM = 19


@dataclass(frozen=True)
class ProbeSpec:
    every: int  # default interval in optimizer steps
    doc: str
    # a ForwardMeasure of the shared forward pass, or a callback of its own: a factory (every,
    # ProbeConfig, probe batch) -> Callback; each by name in training/probes/registry.py
    # (MEASURES, or a factory function there), or the class or factory itself
    measure: str | type | None = None
    callback: str | Callable[[int, ProbeConfig, object], Any] | None = None
    after_forward: bool = False  # its callback runs after the shared forward pass
    default_on: bool = True  # whether a plain run (probes.enabled: null) runs it

    def make_measure(self) -> Any:
        """A fresh instance of its forward measure (resolved in training/probes/registry.py)."""
        if isinstance(self.measure, str):  # by name when built: this module stays torch-free
            return importlib.import_module("training.probes.registry").MEASURES[self.measure]()
        return self.measure()

    def make_callback(self, every: int, cfg: ProbeConfig, batch: object) -> Any:
        """Its callback (the factory resolved in training/probes/registry.py)."""
        factory = self.callback
        if isinstance(factory, str):
            factory = getattr(importlib.import_module("training.probes.registry"), factory)
        return factory(every, cfg, batch)


PROBES: dict[str, ProbeSpec] = {
    "grad_norm": ProbeSpec(
        1,
        "grad_norm/total, /layer_{i}[/attn|/mlp], /last_fc2",
        callback="grad_norm_probe",
    ),
    "act_norm": ProbeSpec(10, "act_norm/layer_{i}", "ActNorm"),
    "update": ProbeSpec(10, names.UPDATE, "ModelUpdate"),
    "max_logit": ProbeSpec(10, "attn/max_logit[/layer_{i}]", "MaxAttnLogit"),
    "attn_entropy": ProbeSpec(
        10, "attn/entropy/layer_{i}, attn/entropy_min/layer_{i}", "AttnEntropy"
    ),
    "act_max": ProbeSpec(10, "act_max/layer_{i}", "ActMax"),
    "log_z": ProbeSpec(10, "logits/log_z, logits/log_z_rms", "LogZ"),
    "block_cos": ProbeSpec(10, "block_cos/layer_{i}", "BlockCos"),
    "update_ratio": ProbeSpec(
        10,
        "update_ratio/layer_{i}, update_ratio/max",
        callback="update_ratio_probe",
    ),
    "sharpness": ProbeSpec(
        100,
        "sharpness/hessian, sharpness/preconditioned",
        callback="sharpness_probe",
        after_forward=True,  # both read theta_s at the step's start
        default_on=False,  # costly: 2 x iters Hessian-vector products
    ),
    "loss_spikes": ProbeSpec(
        10,
        "train/loss_spikes (and loss_spikes in summary.json)",
        callback="loss_spikes_probe",
    ),
    # the instruments of recent papers: off unless named (training/probes/instruments.py,
    # weights.py, spikes.py)
    "attn_sink": ProbeSpec(
        10, "attn/sink[/layer_{i}], attn/first_token/layer_{i}", "AttnSink", default_on=False
    ),
    "massive_act": ProbeSpec(
        10,
        "act_massive/layer_{i}, act_massive/channel|token|abs|count/layer_{i}",
        "MassiveActivations",
        default_on=False,
    ),
    "outlier_kurtosis": ProbeSpec(
        10, "act_kurtosis/layer_{i}", "OutlierKurtosis", default_on=False
    ),
    "linear_out": ProbeSpec(
        10, "linear_out/{q,k,v,proj,fc1,fc2}/layer_{i}", "LinearOutputs", default_on=False
    ),
    "headroom": ProbeSpec(
        10, "headroom/absmax, headroom/fp16, headroom/bf16", "Headroom", default_on=False
    ),
    # on by default, and added to any enabled list of a multi-stream run (training/build.py):
    # it measures nothing with one stream
    "stream_spread": ProbeSpec(10, "streams/spread/layer_{i}", "StreamSpread"),
    "saturation": ProbeSpec(
        10,
        "saturation/{norm,ax2,attn_cap}/layer_{i}, saturation/final_norm, saturation/logit_cap",
        "Saturation",
        default_on=False,
    ),
    "spectral": ProbeSpec(
        100,
        "spectral/{q,k,v,proj,fc1,fc2}/layer_{i}, stable_rank/...",
        callback="spectral_probe",
        default_on=False,
    ),
    "adam_state": ProbeSpec(
        10,
        "adam/{m,v,update}/layer_{i}, adam/{m,v,update}/total",
        callback="adam_state_probe",
        default_on=False,
    ),
    "layer_drop": ProbeSpec(
        100, "layer_drop/layer_{i}", callback="layer_drop_probe", default_on=False
    ),
    "spike_score": ProbeSpec(
        1,
        "spike/loss_z, spike/grad_z (spike_steps_loss, spike_steps_grad in summary.json)",
        callback="spike_score_probe",
        default_on=False,
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
    ``enabled`` None: the registry's default probes; ``add``: probes run besides those (folded
    into ``enabled`` once checked)."""

    enabled: list[str] | None = None
    add: list[str] = field(default_factory=list)  # probes run besides ``enabled``'s
    every: dict[str, int] = field(default_factory=dict)
    batch_size: int = 8  # samples in the fixed probe batch
    sharpness: SharpnessConfig = field(default_factory=SharpnessConfig)
    spike_factor: float = 1.5  # a loss spike: loss > spike_factor x the running median
    spike_window: int = 100  # steps in that running median
    spike_sigma: float = 6.0  # spike_score: a step scored above this many sigmas counts
    spike_sigma_window: int = 128  # the previous steps it is scored against
    spectral_iters: int = 20  # power-iteration steps per matrix and probe step (warm-started)

    def __post_init__(self) -> None:
        enabled = default_probes() if self.enabled is None else self.enabled
        unknown = sorted({n for n in (*enabled, *self.add, *self.every) if n not in PROBES})
        if unknown:
            raise ValueError(f"unknown probe(s) {unknown}; choose from: {', '.join(PROBES)}")
        self.enabled = list(dict.fromkeys([*enabled, *self.add]))
        self.add, self.every = [], dict(self.every)
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
        if not self.spike_sigma > 0:
            raise ValueError(f"probes.spike_sigma must be > 0, got {self.spike_sigma}")
        # a smaller window never holds enough values to score: it would count nothing, silently
        for name, least in (("spike_sigma_window", SCORE_FROM), ("spectral_iters", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                why = " (a score needs 19 values before its step)" if least == SCORE_FROM else ""
                raise ValueError(f"probes.{name} must be an integer >= {least}{why}, got {value}")

    def interval(self, name: str) -> int:
        return self.every.get(name, PROBES[name].every)
