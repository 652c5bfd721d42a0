"""The probe callbacks of a run, built from PROBES (name -> what it measures and how it runs)
and ProbeConfig (which run and how often), both torch-free in training/probe_config.py, which
names the measures and factories below by name. Every probe is a registry entry with its own
interval (``probes.every.<name>``, in optimizer steps) and its off-switch (leave it out of
``probes.enabled``). Forward probes share one pass over the probe batch per step; the others are
callbacks of their own.
"""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback

from training.probe_config import PROBES, ProbeConfig
from training.probes import attention, instruments, measures
from training.probes.forward import ForwardProbes
from training.probes.gradients import GradNormProbe
from training.probes.sharpness import Sharpness
from training.probes.spikes import LossSpikes, SpikeScore
from training.probes.updates import UpdateRatio
from training.probes.weights import AdamState, LayerDrop, Spectral

# The measures of the shared forward pass that PROBES names, by class name.
FORWARD_MEASURES = (
    measures.ActNorm, measures.ActMax, measures.BlockCos, measures.LogZ, measures.ModelUpdate,
    attention.MaxAttnLogit, attention.AttnEntropy, instruments.AttnSink,
    instruments.MassiveActivations, instruments.OutlierKurtosis, instruments.LinearOutputs,
    instruments.Headroom, instruments.Saturation, instruments.StreamSpread,
)  # fmt: skip
MEASURES = {m.__name__: m for m in FORWARD_MEASURES}


# The probes with callbacks of their own (PROBES' callback names), each (every, cfg, batch).
def grad_norm_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return GradNormProbe(every)


def update_ratio_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return UpdateRatio(every)


def sharpness_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return Sharpness(every, cfg.sharpness.iters, cfg.batch_size, batch)


def loss_spikes_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return LossSpikes(every, cfg.spike_factor, cfg.spike_window)


def spectral_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return Spectral(every, cfg.spectral_iters)


def adam_state_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return AdamState(every)


def layer_drop_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return LayerDrop(every, cfg.batch_size, batch)


def spike_score_probe(every: int, cfg: ProbeConfig, batch: object) -> Callback:
    return SpikeScore(every, cfg.spike_sigma, cfg.spike_sigma_window)


def probe_callbacks(
    probes: ProbeConfig | None = None, probe_batch: torch.Tensor | tuple | None = None
) -> list[Callback]:
    """The probe callbacks for ``probes.enabled`` in registry order (the gradient probe before
    the forward pass), the shared forward pass, then those that run after it."""
    probes = probes or ProbeConfig()
    on = [n for n in PROBES if n in probes.enabled]

    def callbacks_of(after_forward: bool) -> list[Callback]:
        return [
            PROBES[n].make_callback(probes.interval(n), probes, probe_batch)
            for n in on
            if PROBES[n].callback is not None and PROBES[n].after_forward == after_forward
        ]

    callbacks = callbacks_of(after_forward=False)
    measures = {n: PROBES[n].make_measure() for n in on if PROBES[n].measure is not None}
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
