"""loss_spikes: how many optimizer steps had a training loss far above the recent ones.

Step s is a spike when  loss_s > factor * median(loss_{s-w}, ..., loss_{s-1})  over the last
w = ``window`` steps before it (fewer at the start; the first step has no reference and is never a
spike). The count so far is logged as ``train/loss_spikes`` every ``every`` steps and ends up in
summary.json as ``loss_spikes``. The loss is the one logged as train/loss (the cross-entropy,
without a z-loss term), read from the task after the step; a module that keeps none gives its
returned loss.

spike_score (spike/loss_z, spike/grad_z): OLMo-core's skip-step score, measured only:
z = |x_s - mean| / std over the previous ``window`` finite values (std with n - 1), for the loss
and the total gradient norm (before clipping), from the step holding max(20, window // 2) values;
the steps above ``sigma`` (6 over 128 by default, as OLMo-core) are counted in summary.json.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

import torch
from lightning.pytorch.callbacks import Callback

from runs import metric_names as names
from training.probes.common import log_to_loggers


class LossSpikes(Callback):
    """Counts loss spikes against the running median of the previous ``window`` losses."""

    def __init__(self, every: int = 10, factor: float = 1.5, window: int = 100) -> None:
        self.every, self.factor, self.window = every, factor, window
        self.recent: deque[float] = deque(maxlen=window)
        self.count = 0
        self.spike_steps: list[int] = []
        self._last_step = -1

    def observe(self, loss: float, step: int) -> bool:
        """Record ``loss`` of optimizer step ``step``; True when it is a spike."""
        spike = bool(self.recent) and loss > self.factor * statistics.median(self.recent)
        if spike:
            self.count += 1
            self.spike_steps.append(step)
        if math.isfinite(loss):  # a non-finite loss ends the run; it never becomes a reference
            self.recent.append(loss)
        return spike

    @staticmethod
    def loss_of(pl_module, outputs, trainer) -> float | None:
        loss = getattr(pl_module, "last_train_loss", None)
        if loss is None:
            out = outputs.get("loss") if isinstance(outputs, dict) else outputs
            loss = None if out is None else float(out.detach()) * trainer.accumulate_grad_batches
        return loss

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step - 1  # the optimizer step this batch ended
        if step == self._last_step or step < 0:  # gradient accumulation: once per step
            return
        self._last_step = step
        loss = self.loss_of(pl_module, outputs, trainer)
        if loss is not None:
            self.observe(loss, step)
        if step % self.every == 0:
            log_to_loggers(trainer, {"train/loss_spikes": float(self.count)}, step)

    def summary(self) -> dict:
        return {"loss_spikes": self.count}

    def state_dict(self) -> dict:
        return {"recent": list(self.recent), "count": self.count, "spike_steps": self.spike_steps}

    def load_state_dict(self, state_dict: dict) -> None:
        self.recent = deque(state_dict.get("recent", []), maxlen=self.window)
        self.count = state_dict.get("count", 0)
        self.spike_steps = list(state_dict.get("spike_steps", []))
        self._last_step = -1


def z_score(value: float, history: list[float]) -> float:
    """|value - mean| / std over ``history`` (std with n - 1), as OLMo-core's skip-step rule."""
    mean = statistics.fmean(history)
    std = statistics.stdev(history)
    return abs(value - mean) / std if std > 0 else (0.0 if value == mean else math.inf)


class SpikeScore(Callback):
    """spike/loss_z and spike/grad_z at every optimizer step: each value's distance from the mean
    of the previous ``window`` finite values, in their standard deviations (OLMo-core's skip-step
    rule: 6 sigma over 128 steps, scored once max(20, window // 2) values are held, the current
    one included). Steps scored above ``sigma`` are counted in summary.json (spike_steps_loss,
    spike_steps_grad). The gradient norm is the total L2 norm before clipping."""

    def __init__(self, every: int = 1, sigma: float = 6.0, window: int = 128) -> None:
        self.every, self.sigma, self.window = every, sigma, window
        self.history: dict[str, deque[float]] = {
            "loss": deque(maxlen=window),
            "grad": deque(maxlen=window),
        }
        self.spikes: dict[str, list[int]] = {"loss": [], "grad": []}
        self.grad_norm: float | None = None
        self._last_step = -1

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        norms = torch._foreach_norm(grads, 2) if grads else []
        self.grad_norm = float(torch.stack(norms).double().square().sum().sqrt()) if norms else None

    def score(self, kind: str, value: float | None, step: int) -> float | None:
        """The z of ``value`` against the history, then ``value`` joins it (if finite)."""
        if value is None:
            return None
        history = self.history[kind]
        z = None
        if len(history) + 1 >= max(20, self.window // 2) and len(history) >= 2:
            z = z_score(value, list(history))
            if z > self.sigma:
                self.spikes[kind].append(step)
        if math.isfinite(value):
            history.append(value)
        return z

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step - 1
        if step == self._last_step or step < 0:
            return
        self._last_step = step
        loss = LossSpikes.loss_of(pl_module, outputs, trainer)
        scores = {
            names.SPIKE_LOSS_Z: self.score("loss", loss, step),
            names.SPIKE_GRAD_Z: self.score("grad", self.grad_norm, step),
        }
        self.grad_norm = None
        logged = {k: v for k, v in scores.items() if v is not None and math.isfinite(v)}
        if step % self.every == 0:
            log_to_loggers(trainer, logged, step)

    def summary(self) -> dict:
        return {f"spike_steps_{kind}": len(steps) for kind, steps in self.spikes.items()}

    def state_dict(self) -> dict:
        return {k: list(v) for k, v in self.history.items()} | {
            f"spikes_{k}": list(v) for k, v in self.spikes.items()
        }

    def load_state_dict(self, state_dict: dict) -> None:
        for kind in self.history:
            self.history[kind] = deque(state_dict.get(kind, []), maxlen=self.window)
            self.spikes[kind] = list(state_dict.get(f"spikes_{kind}", []))
        self._last_step = -1
