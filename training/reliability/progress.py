"""The progress bar over optimizer steps.

Upstream limit: Lightning's RichProgressBar counts the train loader's batches per epoch; the
train loader here is endless (no epochs) and, with gradient accumulation, a step takes several
batches. ``StepProgressBar`` shows ``trainer.global_step`` out of ``trainer.max_steps`` through
the bar's private ``_update(bar_id, current)`` (its signature is guarded in
tests/training/reliability/test_library_contracts.py).
"""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


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
