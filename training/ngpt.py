"""What a model demands of the training loop after each step: nGPT's weights back on the unit
sphere, QK-clip's rescale (``Stack.after_step``, a no-op for the rest).

This callback calls it after every optimizer step, before the checkpoint and probes of that step
run, so a resumed run starts from the weights an uninterrupted one has.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback


class SphereWeights(Callback):
    """Calls ``pl_module.model.after_step()`` after each optimizer step."""

    def __init__(self) -> None:
        self._last_step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self._last_step = trainer.global_step  # a resumed run's weights are normalized already

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self._last_step:  # gradient accumulation: once per step
            self._last_step = trainer.global_step
            pl_module.model.after_step()
