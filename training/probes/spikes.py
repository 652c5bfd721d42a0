"""loss_spikes: how many optimizer steps had a training loss far above the recent ones.

Step s is a spike when  loss_s > factor * median(loss_{s-w}, ..., loss_{s-1})  over the last
w = ``window`` steps before it (fewer at the start; the first step has no reference and is never a
spike). The count so far is logged as ``train/loss_spikes`` every ``every`` steps and ends up in
summary.json as ``loss_spikes``. The loss is the one logged as train/loss (the cross-entropy,
without a z-loss term), read from the task after the step; a module that keeps none gives its
returned loss.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from lightning.pytorch.callbacks import Callback

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
