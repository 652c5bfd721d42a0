"""Divergence detection as a Lightning callback: a diverged run is a result, not a crash.

The fit stops cleanly at the first optimizer step whose loss or gradient is non-finite, or whose
loss exceeds ``loss_factor`` x the initial loss; the run's status and step are recorded for the
summary, and no checkpoint that looks like a good final model is left behind.
"""

from __future__ import annotations

import math
import os

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from runs.record import ReportsToRecord, RunRecord, Status, record_of
from training.sections import DivergenceConfig


def checkpoint_paths(ckpt: Callback) -> set[str]:
    """Files a ModelCheckpoint tracks: last, its top-k, or its latest when it has no monitor."""
    paths = {getattr(ckpt, "last_model_path", ""), getattr(ckpt, "best_model_path", "")}
    return {p for p in paths | set(getattr(ckpt, "best_k_models", {})) if p}


class Divergence(ReportsToRecord, Callback):
    """Stops a run at the first optimizer step whose loss or gradient is non-finite, or whose loss
    exceeds ``loss_factor`` x the reference (the mean of the first ``ref_steps`` finite losses).

    Contract: at that step s the run's record (runs/record.py) goes to diverged at s, with
    the reason, through ``pl_module.mark_diverged(s, reason)`` (a module without one gets a
    record of its own, ``pl_module.record``), and ``trainer.should_stop`` ends the fit cleanly.
    Non-finite gradients skip the update (grads set to None), so weights stay finite; under an
    fp16 GradScaler they are left to the scaler, which skips such steps itself. Only the check's
    own state (the reference loss) is saved in checkpoints; the outcome travels with the record.
    At the end of a diverged fit, every file the checkpoint callbacks track (last, latest,
    top-k) is renamed to ``<name>.diverged.ckpt`` (or deleted, or kept, per ``checkpoint``), so
    no file that looks like a good model of this run survives under its usual name; the
    callbacks' paths follow the rename.
    """

    def __init__(self, cfg: DivergenceConfig | None = None) -> None:
        self.cfg = cfg or DivergenceConfig()
        self.record = RunRecord()  # the module's, from the fit's start
        self.ref_loss: float | None = None
        self._first_losses: list[float] = []
        self._step = 0
        self._announced = False

    def on_fit_start(self, trainer, pl_module) -> None:
        self.record = record_of(pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step = trainer.global_step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if not grads:
            return
        norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
        if not bool(torch.stack(norms).isfinite().all()):  # grads are identical across DDP ranks
            optimizer.zero_grad(set_to_none=True)
            self.mark(trainer, pl_module, self._step, "non-finite gradient")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        reason, step = None, self._step
        if loss is None:  # the module skipped this step; it may have diverged on its own
            if self.record.status == Status.DIVERGED:
                reason = self.record.divergence_reason or "the module marked the run diverged"
                step = self.record.diverged_at_step
                step = self._step if step is None else step
        else:
            reason = self.check_loss(float(loss.detach()) * trainer.accumulate_grad_batches)
        # One rank's verdict stops every rank, so DDP processes never wait on each other.
        if trainer.strategy.reduce_boolean_decision(reason is not None, all=False):
            self.mark(trainer, pl_module, step, reason or "another rank diverged")

    def check_loss(self, value: float) -> str | None:
        """Why ``value`` (one optimizer step's training loss) means divergence, or None."""
        if not math.isfinite(value):
            return f"non-finite loss {value}"
        if self.ref_loss is None:
            self._first_losses.append(value)
            if len(self._first_losses) >= self.cfg.ref_steps:
                self.ref_loss = sum(self._first_losses) / len(self._first_losses)
            return None
        if self.cfg.loss_factor is not None and value > self.cfg.loss_factor * self.ref_loss:
            return f"loss {value:.4g} > {self.cfg.loss_factor} x initial {self.ref_loss:.4g}"
        return None

    def mark(self, trainer, pl_module, step: int, reason: str) -> None:
        mark_module = getattr(pl_module, "mark_diverged", None)
        if callable(mark_module):
            mark_module(step, reason)
        else:
            self.record.diverge(step, reason)
        if not self._announced:
            self._announced = True
            rank_zero_info(f"diverged at step {step}: {reason}; stopping")
        trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        if self.record.status != Status.DIVERGED:
            if not callable(getattr(pl_module, "mark_diverged", None)):
                self.record.complete()  # a plain module: nobody else ends its record
            return
        if self.cfg.checkpoint == "keep" or not trainer.is_global_zero:
            return
        for ckpt in trainer.checkpoint_callbacks:
            top_k = getattr(ckpt, "best_k_models", {})
            for path in checkpoint_paths(ckpt):
                new = self._set_aside(path)
                if path in top_k:
                    score = top_k.pop(path)
                    if new:
                        top_k[new] = score
                for attr in ("last_model_path", "best_model_path", "kth_best_model_path"):
                    if getattr(ckpt, attr, None) == path:
                        setattr(ckpt, attr, new)

    def _set_aside(self, path: str) -> str:
        """Rename (to <name>.diverged.ckpt) or delete ``path``; returns the new path or ""."""
        if not os.path.lexists(path):
            return ""
        if self.cfg.checkpoint == "delete":
            os.remove(path)
            return ""
        stem, ext = os.path.splitext(path)
        os.replace(path, f"{stem}.diverged{ext}")
        return f"{stem}.diverged{ext}"

    def state_dict(self) -> dict:
        return {"ref_loss": self.ref_loss, "_first_losses": self._first_losses}

    def load_state_dict(self, state_dict: dict) -> None:
        # Older checkpoints also hold status, step and reason: the record restores those.
        self.ref_loss = state_dict.get("ref_loss")
        self._first_losses = list(state_dict.get("_first_losses", []))
