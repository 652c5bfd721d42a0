"""Lightning task modules: the optimizer, the learning-rate schedule and what each task logs.

A task wraps one pure-torch model whose forward returns ``(output, loss)``. The shared base builds
the optimizer ``optim.name`` picks (training/optim.py: AdamW, SGD, Adafactor or Muon; weight
decay on >=2-D weights only), warmup + schedule stepped per optimizer step,
throughput, best/last metric tracking and divergence; the two tasks add only what they log.

Every metric row of optimizer step s (train/loss, lr, throughput, and the probes) reaches the
loggers before the trainer's ``on_train_batch_end`` hooks run for that step, i.e. before a
checkpoint taken there (global step s + 1) is written. A resumed run therefore keeps exactly
the rows of steps below the checkpoint's step and logs the rest again (see
training/reliability/resume.py).
A validation after the run diverged (or was interrupted) is neither logged nor tracked.
Randomness inside a step (dropout) is drawn from a generator reseeded from (seed, step, rank),
so it does not depend on what ran before: a resumed run draws what an uninterrupted one draws.
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import numpy as np
import torch
from torch import nn

from models.gpt import GPT, GPTConfig
from models.vit import ViT, ViTConfig
from runs.record import ReportsToRecord, RunRecord
from training.guards import Guarded
from training.optim import OPTIMIZERS, param_groups, z_loss_term
from training.optim_config import OptimConfig, lr_multiplier
from training.reliability.checkpoints import verify

__all__ = ["OPTIMIZERS", "OptimConfig", "lr_multiplier", "param_groups"]  # re-exported


def step_seed(seed: int, step: int, rank: int) -> int:
    """The torch seed of optimizer step ``step`` on ``rank``: decorrelated from the data's
    per-step generators (which seed with seed * 1_000_003 + step) by SeedSequence's hashing."""
    return int(np.random.SeedSequence([seed, step, rank, 1]).generate_state(1)[0])


def rng_states() -> dict:
    """Every global generator a step may draw from: python, numpy, torch CPU and CUDA."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states = {
        "python": random.getstate(),
        # plain numbers: checkpoints load with weights_only=True, which refuses numpy arrays
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    kind, keys, *rest = states["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class TrainTask(ReportsToRecord, L.LightningModule):
    """Shared training loop pieces. Subclasses name their throughput unit and may add metrics.

    ``status`` is "completed" unless the loss turns non-finite: then it is "diverged", that step
    has no gradient (the weights stay finite) and the trainer stops cleanly after it. Callbacks
    that detect divergence by other signs call ``mark_diverged``. Under DDP the logged and
    checked train loss is the mean over ranks, i.e. the loss of the global batch.
    """

    unit = "samples"  # throughput/{unit}_per_s
    # The model this task trains (training/specs.py reads them: the one place they are named).
    model_class: type[nn.Module] = nn.Module
    config_class: type = dict

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> TrainTask:
        """Lightning's loader, after the file's digest check (a checkpoint damaged since its save
        is refused in one line, as on every other load path); never unpickles code."""
        if isinstance(checkpoint_path, str | os.PathLike):
            verify(Path(checkpoint_path), "restore the file from a copy, or train it again")
        kwargs.setdefault("weights_only", True)
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    def __init__(
        self,
        model: nn.Module | None = None,
        optim: OptimConfig | dict | None = None,
        total_steps: int = 1,
        seed: int = 0,
        model_config: dict | None = None,
    ) -> None:
        super().__init__()
        if model is None:  # Task.load_from_checkpoint(path): rebuilt from the saved config
            if model_config is None:
                raise ValueError("pass a model, or the model_config to build one from")
            model = self.model_class(self.config_class(**model_config))
        optim = OptimConfig(**optim) if isinstance(optim, dict) else optim or OptimConfig()
        cfg = getattr(model, "cfg", None)
        # Saved in every checkpoint, so that it describes itself (plain values: safe to load).
        self.save_hyperparameters(
            {
                "model_config": asdict(cfg) if is_dataclass(cfg) else None,
                "optim": optim.read(),  # what its optimizer reads (wandb's config too)
                "total_steps": total_steps,
                "seed": seed,
            }
        )
        self.model = model
        self.optim = optim
        self.total_steps = total_steps
        self.seed = seed
        self.record = RunRecord()  # the run dir's record, handed over by the build
        self.init_loss: float | None = None
        self.last_train_loss: float | None = None
        self.last_val_loss: float | None = None
        self.best_val_loss: float | None = None
        self.last_val_step: int | None = None
        self.units_seen = 0
        self.train_seconds = 0.0
        self._step_start = 0.0
        self._timed_step = -1
        self._step_units = 0
        self._val_sums: dict[str, torch.Tensor] = {}

    def on_train_start(self) -> None:
        trainer = self.trainer
        every, per_epoch = trainer.val_check_batch, trainer.check_val_every_n_epoch
        endless = trainer.num_training_batches == float("inf")
        never = every in (None, float("inf")) or per_epoch is not None
        if trainer.enable_validation and endless and never:
            raise ValueError(
                "validation would never run: the train loader is endless and has no epochs; "
                "pass L.Trainer(val_check_interval=<steps>, check_val_every_n_epoch=None), "
                "or limit_val_batches=0 to train without validation"
            )

    def count_units(self, batch) -> int:
        """Tokens or samples in one batch (for throughput)."""
        return int(batch[1].numel())

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None):
        return self.model(inputs, targets)

    # --- training -------------------------------------------------------------------------
    def mark_diverged(self, step: int, reason: str | None = None) -> None:
        self.record.diverge(step, reason)
        self.trainer.should_stop = True

    def log_rows(self, metrics: dict[str, float], step: int) -> None:
        """Straight to the loggers at ``step``, now (Lightning's own logging of step metrics
        lands after the step's ``on_train_batch_end``, i.e. after a checkpoint taken there)."""
        if self.trainer.is_global_zero:
            for logger in self.loggers:
                logger.log_metrics(metrics, step=step)

    def on_fit_start(self) -> None:
        # Admin's omegas (a no-op for other placements): one forward on the first train batch,
        # at the start of a fresh run only; a resumed run has them from its checkpoint.
        dm = self.trainer.datamodule
        if self.trainer.ckpt_path is None and hasattr(dm, "train_batch"):
            self.model.profile_init(dm.train_batch(0)[0].to(self.device))

    def logging_step(self) -> bool:
        """Every log_every_n_steps-th step, and the last one: the curves end where the run did."""
        step = self.global_step
        return step % max(1, self.trainer.log_every_n_steps) == 0 or step == self.total_steps - 1

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        step = self.global_step
        if step == self._timed_step:  # a later micro-batch of gradient accumulation
            return
        self._timed_step, self._step_units = step, 0
        torch.manual_seed(step_seed(self.seed, step, self.global_rank))
        self._step_start = time.perf_counter()

    def training_step(self, batch, batch_idx: int):
        inputs, targets = batch
        logits, loss = self(inputs, targets)
        self._step_units += self.count_units(batch)
        # The global batch's loss: every rank decides on divergence from the same number.
        # (a clone: DDP's reduce works in place, and backward still needs this rank's loss)
        mean_loss = float(self.trainer.strategy.reduce(loss.detach().clone(), reduce_op="mean"))
        self.log("train/loss", mean_loss, prog_bar=True, logger=False)
        # train/loss stays the cross-entropy; the z-loss term is trained on and logged apart.
        z_term = z_loss_term(logits, self.optim.z_loss) if self.optim.z_loss else None
        if self.logging_step() and self._step_units == self.count_units(batch):
            group = self.trainer.optimizers[0].param_groups[0]
            lr = group["lr"] / group.get("lr_scale", 1.0)  # optim.lr as scheduled (muP: unscaled)
            rows = {"train/loss": mean_loss, "lr": lr}
            if z_term is not None:
                z = self.trainer.strategy.reduce(z_term.detach().clone(), reduce_op="mean")
                rows["train/z_loss"] = float(z)
            self.log_rows(rows, self.global_step)
        if not math.isfinite(mean_loss):
            self.mark_diverged(self.global_step, f"non-finite loss {mean_loss}")
            return None  # no backward: the optimizer finds no gradient and leaves the weights
        self.last_train_loss = mean_loss
        if self.global_step == 0 and self._step_units == self.count_units(batch):
            self.init_loss = mean_loss  # the loss at initialization: "did not train" reads it
        return loss if z_term is None else loss + z_term

    def optimizer_step(self, *args, **kwargs) -> None:
        step = self.global_step
        before = self.guard_counts()
        super().optimizer_step(*args, **kwargs)
        if rose := {k: v for k, v in self.guard_counts().items() if v > before.get(k, 0)}:
            # a guard acted at this step: its count so far (the card places its actions)
            self.log_rows({f"guard/{k}": float(v) for k, v in rose.items()}, step)
        # Forward, backward and update; validation, checkpoints and logger flushes come later.
        seconds = time.perf_counter() - self._step_start
        units = self._step_units * self.trainer.world_size
        self.units_seen += units
        self.train_seconds += seconds
        if self.logging_step():
            self.log_rows({f"throughput/{self.unit}_per_s": units / max(seconds, 1e-9)}, step)

    @property
    def throughput(self) -> float | None:
        return self.units_seen / self.train_seconds if self.train_seconds > 0 else None

    def configure_optimizers(self):
        optimizer = OPTIMIZERS[self.optim.name](self.model, self.optim)
        if self.optim.guards:
            optimizer = Guarded(optimizer, self.optim.guards)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_multiplier(step, self.optim, self.total_steps)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    # --- validation: sums reduced across devices, so the mean is exact under DDP ----------
    def on_before_optimizer_step(self, optimizer) -> None:
        """Lightning calls this before it clips the gradients: skip_step's gradient norm."""
        if isinstance(optimizer, Guarded):
            optimizer.record_grad_norm()

    def on_validation_epoch_start(self) -> None:
        self._val_sums = {}

    def accumulate(self, **sums: torch.Tensor) -> None:
        for key, value in sums.items():
            self._val_sums[key] = self._val_sums.get(key, 0.0) + value.detach().double()

    def validation_step(self, batch, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        _, loss = self(inputs, targets)
        n = targets.new_tensor(float(targets.shape[0]), dtype=torch.float64)
        self.accumulate(loss=loss * n, count=n)
        return loss

    def reduced_val_sums(self) -> dict[str, float]:
        return {
            k: float(self.trainer.strategy.reduce(v, reduce_op="sum"))
            for k, v in self._val_sums.items()
        }

    def on_validation_epoch_end(self) -> None:
        if not self._val_sums:
            return
        sums = self.reduced_val_sums()
        metrics = {"val/loss": sums["loss"] / sums["count"], **self.val_extras(sums)}
        self.log_dict(metrics, prog_bar=True, logger=False)  # progress bar, callback_metrics
        if self.trainer.sanity_checking or not self.record.healthy:
            return  # a diverged or interrupted run's extra validation is not a result
        # Logged at the number of optimizer steps taken, like train/loss (Lightning's own val
        # logging lands one step earlier during fit and one later after it).
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
        self.track_val(metrics)

    def val_extras(self, sums: dict[str, float]) -> dict[str, float]:
        """Subclasses add metrics beyond val/loss, computed from the reduced sums."""
        return {}

    def track_val(self, metrics: dict[str, float]) -> None:
        val_loss = metrics["val/loss"]
        self.last_val_loss, self.last_val_step = val_loss, self.global_step
        if math.isfinite(val_loss) and (
            self.best_val_loss is None or val_loss < self.best_val_loss
        ):
            self.best_val_loss = val_loss

    # --- resume: tracked results and RNG states travel with the checkpoint ------------------
    # (the datamodule saves its next step; the callbacks save their own state)
    TRACKED = (
        "init_loss",
        "last_train_loss",
        "last_val_loss",
        "last_val_step",
        "best_val_loss",
        "units_seen",
        "train_seconds",
    )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        tracked = {k: getattr(self, k) for k in self.TRACKED}
        checkpoint["normlab_task"] = {**self.record.state(), **tracked}
        checkpoint["rng_states"] = rng_states()  # Lightning saves none of them

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        tracked = checkpoint.get("normlab_task", {})
        self.record.load_state(tracked)
        for key in self.TRACKED:
            if key in tracked:
                setattr(self, key, tracked[key])
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])

    def results(self) -> dict:
        """The task's measurements for summary.json (the outcome is in its record)."""
        return {
            "init_loss": self.init_loss,
            "final_train_loss": self.last_train_loss,
            "final_val_loss": self.last_val_loss,
            "best_val_loss": self.best_val_loss,
            f"{self.unit}_per_s": self.throughput,
            **self.guard_counts(),
        }

    def guard_counts(self) -> dict[str, int]:
        """The guards' counts (skipped_steps, clipped_updates, zclipped_steps), when the
        optimizer has any."""
        optimizers = self.trainer.optimizers if self._trainer is not None else []
        return optimizers[0].counts() if optimizers and isinstance(optimizers[0], Guarded) else {}


class LanguageModelTask(TrainTask):
    """Next-token prediction; the loss is mean cross-entropy in nats per token. With a datamodule
    that knows each token's UTF-8 bytes (``token_bytes``), val/bpb = val nats / (ln 2 * bytes)
    compares runs across tokenizers."""

    unit = "tokens"
    model_class, config_class = GPT, GPTConfig
    TRACKED = (*TrainTask.TRACKED, "last_val_bpb", "best_val_bpb")
    last_val_bpb: float | None = None
    best_val_bpb: float | None = None

    def validation_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, targets = super().validation_step(batch, batch_idx), batch[1]
        table = getattr(self.trainer.datamodule, "token_bytes", None)
        if table is not None:  # nats: the mean loss times the targets
            n_bytes = table.to(targets.device)[targets].sum()
            self.accumulate(nats=loss * targets.numel(), bytes=n_bytes)
        return loss

    def val_extras(self, sums: dict[str, float]) -> dict[str, float]:
        if "bytes" not in sums:
            return {}
        return {"val/bpb": sums["nats"] / (math.log(2) * sums["bytes"])}

    def track_val(self, metrics: dict[str, float]) -> None:
        super().track_val(metrics)
        if "val/bpb" in metrics:
            bpb = self.last_val_bpb = metrics["val/bpb"]
            self.best_val_bpb = bpb if self.best_val_bpb is None else min(self.best_val_bpb, bpb)

    def results(self) -> dict:
        return {
            **super().results(),
            "final_val_bpb": self.last_val_bpb,
            "best_val_bpb": self.best_val_bpb,
        }


class ImageClassificationTask(TrainTask):
    """Image classification; adds val/acc and tracks the best accuracy."""

    unit = "samples"
    model_class, config_class = ViT, ViTConfig
    TRACKED = (*TrainTask.TRACKED, "best_val_acc", "last_val_acc")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.best_val_acc: float | None = None
        self.last_val_acc: float | None = None

    def validation_step(self, batch, batch_idx: int) -> None:
        images, labels = batch
        logits, loss = self(images, labels)
        n = labels.new_tensor(float(labels.shape[0]), dtype=torch.float64)
        correct = (logits.argmax(dim=-1) == labels).sum()
        self.accumulate(loss=loss * n, count=n, correct=correct)

    def val_extras(self, sums: dict[str, float]) -> dict[str, float]:
        return {"val/acc": sums["correct"] / sums["count"]}

    def track_val(self, metrics: dict[str, float]) -> None:
        super().track_val(metrics)
        acc = self.last_val_acc = metrics["val/acc"]
        self.best_val_acc = acc if self.best_val_acc is None else max(self.best_val_acc, acc)

    def results(self) -> dict:
        return {
            **super().results(),
            "final_val_acc": self.last_val_acc,
            "best_val_acc": self.best_val_acc,
        }
