"""nGPT's one demand on the training loop: the weights back on the unit sphere after each step.

The model does the normalizing (``Stack.normalize_weights``, a no-op for other placements); this
callback calls it after every optimizer step, before the checkpoint and probes of that step run,
so a resumed run starts from the weights an uninterrupted one has.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback


class SphereWeights(Callback):
    """Calls ``pl_module.model.normalize_weights()`` after each optimizer step."""

    def __init__(self) -> None:
        self._last_step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self._last_step = trainer.global_step  # a resumed run's weights are normalized already

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self._last_step:  # gradient accumulation: once per step
            self._last_step = trainer.global_step
            pl_module.model.normalize_weights()
