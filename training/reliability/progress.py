"""A run's progress over optimizer steps: the bar, or plain lines in a parallel sweep.

Upstream limit: Lightning's RichProgressBar counts the train loader's batches per epoch; the
train loader here is endless (no epochs) and, with gradient accumulation, a step takes several
batches. ``StepProgressBar`` shows ``trainer.global_step`` out of ``trainer.max_steps`` through
the bar's private ``_update(bar_id, current)`` (its signature is guarded in
tests/training/reliability/test_library_contracts.py).
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback, RichProgressBar

from training.threads import parallel_sweep


def step_progress(name: str, max_steps: int) -> Callback:
    """The run's progress display: plain lines prefixed by its name in a parallel sweep (the
    bars of parallel jobs would draw over each other), else the bar."""
    if parallel_sweep():
        return StepLines(name, max_steps // 10)
    return StepProgressBar(leave=True)


class StepProgressBar(RichProgressBar):
    """Rich progress over optimizer steps (not micro-batches: with gradient accumulation a step
    takes several), out of trainer.max_steps; the endless train loader has no epochs."""

    @property
    def total_train_batches(self) -> int:
        return self.trainer.max_steps

    def _get_train_description(self, current_epoch: int) -> str:
        return "train steps"

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._update(self.train_progress_bar_id, trainer.global_step)


class StepLines(Callback):
    """Progress as plain lines prefixed by the variant, every tenth of the run: what parallel
    sweep jobs print instead of progress bars, which would draw over each other."""

    def __init__(self, name: str, every: int) -> None:
        self.name, self.every = name, max(1, every)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if trainer.is_global_zero and (step % self.every == 0 or step == trainer.max_steps):
            loss = trainer.callback_metrics.get("train/loss")
            text = "" if loss is None else f" train/loss={float(loss):.4f}"
            print(f"[{self.name}] step {step}/{trainer.max_steps}{text}", flush=True)
