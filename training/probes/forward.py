"""The fixed probe batch, and the forward probes that read one no-grad pass over it.

Forward probes run at the start of optimizer step s, in eval mode (dropout off: the probe reads
the function, not a noisy sample of it), on theta_s, i.e. after s updates. Each measure attaches
its own hooks for the pass and turns what they saw into 0-d tensors; all of them reach the host in
one sync.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from training.probes.common import blocks_of, log_to_loggers, to_floats


class ForwardMeasure:
    """One quantity read during a no-grad forward pass over the probe batch."""

    def attach(self, model: nn.Module) -> list:
        """Register hooks on ``model`` (a GPT or ViT: its ``.blocks``, its final norm...);
        returns their handles (removed after the pass)."""
        return []

    def read(self, logits: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@torch.no_grad()
def run_forward_probes(
    model: nn.Module,
    inputs: torch.Tensor,
    measures: Sequence[ForwardMeasure],
    step: int,
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """One eval-mode forward of ``inputs`` with the measures' hooks; restores the train mode."""
    handles = [h for m in measures for h in m.attach(model)]
    was_training = model.training
    model.eval()
    try:
        with context():
            out = model(inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    logits = (out[0] if isinstance(out, tuple) else out).float()
    values: dict[str, torch.Tensor] = {}
    for m in measures:
        values.update(m.read(logits, step))
    return to_floats(values)


class ProbeBatchCallback(Callback):
    """Holds the fixed probe batch: ``probe_batch`` if given, else the first ``batch_size``
    samples of the first batch of the datamodule's val loader (then the trainer's val, then train
    loader). It travels in checkpoints, so a resumed run keeps measuring the same thing."""

    def __init__(self, batch_size: int = 8, probe_batch: torch.Tensor | tuple | None = None):
        self.batch_size = batch_size
        self.inputs: torch.Tensor | None = None
        self.targets: torch.Tensor | None = None
        if probe_batch is not None:
            self._keep(probe_batch)

    def _keep(self, batch) -> None:
        pair = isinstance(batch, tuple | list)
        inputs, targets = (
            (batch[0], batch[1] if len(batch) > 1 else None) if pair else (batch, None)
        )
        self.inputs = inputs[: self.batch_size].detach().cpu()
        self.targets = None if targets is None else targets[: self.batch_size].detach().cpu()

    def _first_batch(self, trainer):
        datamodule = getattr(trainer, "datamodule", None)
        sources = [
            datamodule.val_dataloader if datamodule is not None else None,
            lambda: trainer.val_dataloaders,
            lambda: trainer.train_dataloader,
        ]
        error: Exception | None = None
        for source in sources:
            try:
                loader = source() if source is not None else None
                if isinstance(loader, list | tuple):
                    loader = loader[0] if loader else None
                if isinstance(loader, dict):
                    loader = next(iter(loader.values()), None)
                if loader is not None:
                    return next(iter(loader))
            except Exception as e:  # e.g. a datamodule without val_dataloader: try the next
                error = e
        raise ValueError(
            f"{type(self).__name__} found no batch; pass probe_batch=... "
            "or give the trainer a val dataloader"
        ) from error

    def on_train_start(self, trainer, pl_module) -> None:
        blocks_of(pl_module)  # fail at the start, not at the first probe step
        if self.inputs is None:
            self._keep(self._first_batch(trainer))

    def state_dict(self) -> dict:
        return {"inputs": self.inputs, "targets": self.targets}

    def load_state_dict(self, state_dict: dict) -> None:
        self.inputs = state_dict.get("inputs", self.inputs)
        self.targets = state_dict.get("targets", self.targets)


class ForwardProbes(ProbeBatchCallback):
    """The forward measures (name -> measure), each every ``every[name]`` optimizer steps."""

    def __init__(
        self,
        measures: dict[str, ForwardMeasure],
        every: dict[str, int],
        batch_size: int = 8,
        probe_batch: torch.Tensor | tuple | None = None,
    ) -> None:
        super().__init__(batch_size, probe_batch)
        self.measures, self.every = dict(measures), {n: every[n] for n in measures}
        self._last_step = -1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:  # gradient accumulation: once per optimizer step
            return
        self._last_step = step
        due = [m for name, m in self.measures.items() if step % self.every[name] == 0]
        if not due:
            return
        inputs = trainer.precision_plugin.convert_input(self.inputs.to(pl_module.device))
        metrics = run_forward_probes(
            pl_module.model, inputs, due, step, trainer.precision_plugin.forward_context
        )
        log_to_loggers(trainer, metrics, step)

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "measures": {name: m.state_dict() for name, m in self.measures.items()},
        }

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for name, state in state_dict.get("measures", {}).items():
            if name in self.measures:
                self.measures[name].load_state_dict(state)
