"""Contracts with the private parts of Lightning, wandb and torch that normlab relies on, one
test per hook: an upgrade that renames or changes one fails here, loudly, instead of silently
changing what a run records. (pyproject admits lightning>=2.4,<3: these tests are what make the
range safe.)"""

from __future__ import annotations

import inspect

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter


def test_the_csv_writer_checks_its_dir_through_an_overridable_hook(tmp_path):
    """reliability/metrics_csv.py: _ContinuingWriter keeps earlier rows by overriding this."""
    calls = []

    class Writer(ExperimentWriter):
        def _check_log_dir_exists(self) -> None:
            calls.append(self.metrics_file_path)

    Writer(str(tmp_path))
    assert calls == [str(tmp_path / "metrics.csv")]


def test_the_csv_logger_builds_its_writer_lazily_on_a_filesystem(tmp_path):
    """reliability/metrics_csv.py: ResumableCSVLogger.experiment replaces the writer it builds."""
    logger = CSVLogger(str(tmp_path), name="", version="")
    assert logger._experiment is None and hasattr(logger._fs, "makedirs")
    assert isinstance(logger.experiment, ExperimentWriter) and logger._experiment is not None


def test_the_rich_bar_takes_a_bar_id_and_a_position():
    """training/reliability/progress.py: StepProgressBar counts optimizer steps with these."""
    params = list(inspect.signature(RichProgressBar._update).parameters)
    assert params[:3] == ["self", "progress_bar_id", "current"]
    assert "current_epoch" in inspect.signature(RichProgressBar._get_train_description).parameters
    assert isinstance(inspect.getattr_static(RichProgressBar, "total_train_batches"), property)


def test_the_epoch_loop_counts_batches_across_epochs():
    """training/reliability/resume.py: validation_follows reads total_batch_idx."""
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert isinstance(trainer.fit_loop.epoch_loop.total_batch_idx, int)


def test_wandb_logger_keeps_its_init_arguments():
    """training/loggers.py: the anonymous=None Lightning passes is dropped from this dict."""
    logger = WandbLogger(project="p", offline=True)
    assert "anonymous" in logger._wandb_init and logger._wandb_init["project"] == "p"


def test_foreach_norm_equals_the_norms_one_by_one():
    """training/probes/gradients.py and training/divergence.py: one fused call for all norms."""
    tensors = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2, 2).bfloat16()]
    fused = torch._foreach_norm(tensors, 2, dtype=torch.float32)
    for t, n in zip(tensors, fused, strict=True):
        torch.testing.assert_close(n, t.float().norm())
