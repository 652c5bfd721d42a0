"""The fit of a built run and what it adds to the run's record (summary.json's results): the
fields the build knows before the first step (``built_results``) and those the fit measured
(``Fit.fit``). training/build.py builds the ``Fit``; train.py calls ``fit()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as L
from torch import nn

from models.kernels import kernel_used
from runs.record import RunRecord, Status, did_not_train
from training.mfu import utilization
from training.probes.registry import probe_summary
from training.reliability.resume import ResumeCheckpoint
from training.task import TrainTask


def built_results(
    dm: L.LightningDataModule,
    model: nn.Module,
    warmup_steps: int,
    resumed_from: int | None,
) -> dict[str, Any]:
    """What the record holds before the first step: the data's reference loss, the model's
    size, where a resume starts."""
    results: dict[str, Any] = {}
    if hasattr(dm, "lossy_tokenizer"):
        results["lossy_tokenizer"] = dm.lossy_tokenizer
    # The loss of a model that learned nothing useful: the plots draw it as a reference line.
    if hasattr(dm, "unigram_loss"):
        results["unigram_loss"] = dm.unigram_loss
    elif hasattr(dm, "num_classes"):
        results["chance_loss"] = math.log(dm.num_classes)
    results.update(
        params=model.num_params(), resumed_from_step=resumed_from, warmup_steps=warmup_steps
    )
    return results


@dataclass
class Fit:
    """A built run; ``fit()`` trains it and puts what it measured into the run's record."""

    task: TrainTask
    datamodule: L.LightningDataModule
    trainer: L.Trainer
    ckpt_path: Path | None

    @property
    def record(self) -> RunRecord:
        return self.task.record

    def fit(self) -> None:
        """Train (or continue), then validate and checkpoint the final weights unless the run
        diverged or was interrupted (a diverged run keeps no checkpoint that looks final)."""
        trainer, task, record = self.trainer, self.task, self.record
        try:
            trainer.fit(task, datamodule=self.datamodule, ckpt_path=self.ckpt_path)
        except BaseException:
            record.results["steps"] = trainer.global_step  # how far it got, whatever stopped it
            raise
        resume = next((c for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), None)
        if resume is not None and resume.interrupted is not None:
            record.interrupt(resume.interrupted)
        record.complete()  # the fit ran to its end, unless it diverged or was interrupted
        if record.healthy and task.last_val_step != trainer.global_step:
            trainer.validate(task, datamodule=self.datamodule, verbose=False)
        steps = trainer.global_step
        if record.status == Status.DIVERGED and record.diverged_at_step is not None:
            steps = record.diverged_at_step  # the healthy steps; the diverged one is not counted
        record.results.update(
            {
                **task.results(),
                "steps": steps,
                "precision": str(trainer.precision),  # what ran (Lightning's resolved setting)
                **utilization(task.model, task.unit, task.throughput, str(trainer.precision)),
                "derived": task.model.derived(),  # DeepNorm's alpha and beta, Admin's omegas
                "fused_rmsnorm": kernel_used(),
                **probe_summary(trainer.callbacks),  # loss_spikes
            }
        )
        record.results["did_not_train"] = did_not_train(record.summary())
        # last: a final save that fails (a full disk) leaves a record of the steps and losses
        # the fit reached, not an empty one
        if record.healthy and resume is not None:
            resume.save(trainer, final=True)
