"""What every probe shares: the blocks it reads, the loggers it writes to, one host sync."""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as L
import torch
from torch import nn


def blocks_of(pl_module: nn.Module) -> Sequence[nn.Module]:
    model = getattr(pl_module, "model", None)
    if model is None or not hasattr(model, "blocks"):
        raise ValueError(
            "probes need pl_module.model to be a GPT or ViT with .blocks; "
            "wrap the model in a task module that stores it as self.model"
        )
    return model.blocks


def to_floats(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """0-d tensors -> Python floats with one device sync for all of them."""
    if not values:
        return {}
    floats = torch.stack([v.reshape(()).float() for v in values.values()]).tolist()
    return dict(zip(values, floats, strict=True))


def log_to_loggers(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
    if metrics and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


class Every:
    """A callback that fires once per optimizer step (gradient accumulation calls a batch hook
    per micro-batch), every ``every`` steps."""

    every: int
    _last_step: int = -1

    def due(self, step: int) -> bool:
        if step == self._last_step or step % self.every:
            return False
        self._last_step = step
        return True
