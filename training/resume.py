"""Resuming a run in its own directory: atomic checkpoints, safe loading and gap-free metrics.

Running the same command into the same run dir again picks up where the last attempt stopped
(training/rundir.py decides which): a finished run is skipped, an unfinished one continues from
``last.ckpt``, an empty dir starts at step 0.

Everything resume needs travels in the checkpoint, in the state of one callback,
``ResumeCheckpoint``: the run's settings (checked against a rerun's), and which metrics.csv rows
were on disk when it was written. A checkpoint taken at optimizer step G is written after every
metric row of steps < G (the task and the probes log a step's rows before its
``on_train_batch_end``; the loggers are flushed just before the write) and before any row of a
later step. When a validation runs at G, the checkpoint waits for it (a resumed fit does not
repeat a validation that was due at its starting step), so the val rows at G are on disk too. A
resumed run keeps exactly those rows (``step < metrics_below``, plus val rows at ``val_done_at``)
and logs the rest again: rows a killed attempt wrote after its checkpoint are superseded, never
duplicated, and no step goes missing. (Lightning's CSVLogger deletes metrics.csv when it starts,
hence ``ResumableCSVLogger``.)

SIGTERM (SLURM, ``timeout``) and SIGINT stop the fit at the next step boundary with a fresh
checkpoint; the run is recorded as ``interrupted`` and the same command resumes it.
"""

from __future__ import annotations

import csv
import errno
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from training.record import record_of

CHECKPOINT = "last.ckpt"
STATE_KEY = "resume"  # ResumeCheckpoint's entry in checkpoint["callbacks"]
DISK_ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EPERM)


class DiskError(OSError):
    """The run dir cannot be written; the message names the directory and the fix."""


def disk_error(err: OSError, path: Path) -> DiskError | OSError:
    """A one-line DiskError for a full, read-only or forbidden directory; else ``err``."""
    if err.errno not in DISK_ERRORS:
        return err
    why = "is full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "is not writable"
    return DiskError(
        err.errno,
        f"cannot write {path.name}: {path.parent} {why} ({os.strerror(err.errno)}); free space "
        "or fix the permissions there, or pick another dir with hydra.run.dir=...; the last good "
        "checkpoint is intact",
    )


# --- writing and reading checkpoints --------------------------------------------------------
class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes ``<path>.tmp`` next to the target, fsyncs it, then renames it over the target, so a
    kill or a full disk at any moment leaves the old checkpoint or the new one, never a mix.
    (Lightning's own save goes through the system temp dir and ``shutil.move``, which copies in
    place across filesystems.) Loading never unpickles code (``weights_only=True``)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise disk_error(err, path) from err
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None):
        return load_checkpoint(Path(path))


def load_checkpoint(path: Path) -> dict:
    """Tensors, containers and numbers only: a crafted file cannot run code here."""
    return torch.load(path, map_location="cpu", weights_only=True)


def read_checkpoint(path: Path, fix: str = "delete it or pass resume=false to start fresh") -> dict:
    """The checkpoint's contents, or one line saying why it cannot be used (and ``fix``)."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist; fix ckpt_path")
    try:
        ckpt = load_checkpoint(path)
    except Exception as err:  # torch raises many types for truncated, foreign or unsafe files
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise ValueError(f"checkpoint {path} is unreadable or unsafe ({reason}); {fix}") from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        raise ValueError(f"{path} is not a training checkpoint of this project; {fix}")
    return ckpt


def resume_state(ckpt: dict) -> dict:
    """ResumeCheckpoint's saved state: run_config, metrics_below, val_done_at."""
    return ckpt.get("callbacks", {}).get(STATE_KEY, {})


def metrics_cut(ckpt: dict | None) -> tuple[int, int | None]:
    """(metrics_below, val_done_at): which metrics.csv rows predate the checkpoint."""
    if ckpt is None:
        return 0, None
    state = resume_state(ckpt)
    return int(state.get("metrics_below") or ckpt["global_step"]), state.get("val_done_at")


def check_fits(path: Path, ckpt: dict, module: torch.nn.Module) -> None:
    """The checkpoint's weights have the names and shapes of ``module``'s."""
    want = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items()}
    problems = [f"{k} missing" for k in sorted(want.keys() - have.keys())]
    problems += [f"unexpected {k}" for k in sorted(have.keys() - want.keys())]
    problems += [
        f"{k} is {list(have[k])}, the model wants {list(want[k])}"
        for k in sorted(want.keys() & have.keys())
        if want[k] != have[k]
    ]
    if problems:
        raise ValueError(
            f"checkpoint {path} does not fit this model ({problems[0]}; {len(problems)} "
            "differences); pass the settings it was trained with, or resume=false to start fresh"
        )


# --- when to write, and what the checkpoint remembers ----------------------------------------
class ResumeCheckpoint(Checkpoint):
    """``last.ckpt`` every ``every_n_steps`` optimizer steps, also once ``every_s`` seconds have
    passed since the last write (None: steps only), and at the step boundary after a SIGTERM or
    SIGINT (then the fit stops and ``interrupted`` holds the signal number).

    Not written at the last step (the run saves the final weights after their validation) nor
    once the run is stopping for another reason (a diverged run leaves no checkpoint that looks
    like a good model). ``last_model_path`` (as on ModelCheckpoint) lets the Divergence callback
    set the file aside, a resumed run's too.
    """

    def __init__(
        self,
        path: str | Path,
        every_n_steps: int,
        every_s: float | None = None,
        run_config: dict | None = None,
    ) -> None:
        self.path = str(path)
        self.every_n_steps, self.every_s = every_n_steps, every_s
        self.run_config = run_config  # the settings that produced this run
        self.metrics_below, self.val_done_at = 0, None
        self.interrupted: int | None = None
        self.last_model_path = ""
        self.best_model_path = ""
        self.best_k_models: dict[str, Any] = {}
        self._saved_step = -1
        self._after_validation = False
        self._last_save = time.monotonic()
        self._handlers: dict[int, Any] = {}

    @property
    def state_key(self) -> str:
        return STATE_KEY

    # --- signals: note them, act at the step boundary ------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        self.interrupted = signum

    def on_train_start(self, trainer, pl_module) -> None:
        self._last_save = time.monotonic()
        self._saved_step = trainer.global_step  # a resumed run's starting point is saved already
        if os.path.isfile(self.path):
            self.last_model_path = self.path
        # After Lightning's own handlers (registered after on_fit_start): ours stop at a step
        # boundary with a checkpoint instead of raising out of the fit.
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._handlers[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread: leave the signals alone
                break

    def on_train_end(self, trainer, pl_module) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._handlers = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        stop = trainer.strategy.reduce_boolean_decision(self.interrupted is not None, all=False)
        if stop:  # every rank stops here together, whichever was signalled
            self.interrupted = self.interrupted or signal.SIGTERM
            trainer.should_stop = True
            if step != self._saved_step and validation_follows(trainer):
                self._after_validation = True  # a regular validation: checkpoint after it
            else:
                if step != self._saved_step:
                    self.save(trainer)
                # the stop's extra validation is not a result
                record_of(pl_module).interrupt(self.interrupted)
            return
        if step == self._saved_step or trainer.should_stop or step >= trainer.max_steps:
            return
        due = step % self.every_n_steps == 0
        if self.every_s is not None:  # one verdict for all ranks: they all take part in a save
            late = time.monotonic() - self._last_save >= self.every_s
            due = trainer.strategy.reduce_boolean_decision(due or late, all=False)
        if due and validation_follows(trainer):
            self._after_validation = True
        elif due:
            self.save(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._after_validation and not trainer.sanity_checking:
            self._after_validation = False
            stopping = trainer.should_stop and self.interrupted is None
            if trainer.state.fn == "fit" and not stopping:
                self.save(trainer, val_done=True)
            if self.interrupted is not None:
                record_of(pl_module).interrupt(self.interrupted)

    def save(self, trainer, val_done: bool = False, final: bool = False) -> None:
        """Write the checkpoint after every metric row it covers is on disk. ``final``: after
        the last validation, so every row of the run is covered."""
        step = trainer.global_step
        self.metrics_below = step + 1 if final else step
        self.val_done_at = step if val_done and not final else None
        for logger in trainer.loggers:
            logger.save()
        trainer.save_checkpoint(self.path, weights_only=False)
        self.last_model_path, self._saved_step = self.path, step
        self._last_save = time.monotonic()

    def state_dict(self) -> dict:
        keys = ("run_config", "metrics_below", "val_done_at")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state_dict: dict) -> None:
        pass  # read up front by the run dir's plan; this run's own config is the one recorded


def validation_follows(trainer) -> bool:
    """Whether the fit validates right after this batch: the trainer's batch-count rule for an
    endless train loader (validation every ``val_check_batch`` batches, counted across epochs)."""
    every = trainer.val_check_batch
    if not trainer.enable_validation or every in (None, float("inf")):
        return False
    done = trainer.fit_loop.epoch_loop.total_batch_idx + 1
    return trainer.check_val_every_n_epoch is None and done % int(every) == 0


def default_every_n_steps(max_steps: int) -> int:
    """A tenth of the run: a kill loses at most ~10% of it (every_s bounds the time lost)."""
    return max(1, max_steps // 10)


# --- metrics.csv across attempts -----------------------------------------------------------
def row_step(row: dict[str, str]) -> int | None:
    """The step of a metrics.csv row, or None for a row cut short or garbled by a kill."""
    try:
        step = float(row.get("step") or "")
    except (TypeError, ValueError):
        return None
    if None in row or not step.is_integer():  # None: more cells than the header has names
        return None
    return int(step)


def written_before(row: dict[str, str], below: int, val_done_at: int | None) -> bool:
    """Whether a metrics.csv row was on disk before the checkpoint (see the module docstring)."""
    step = row_step(row)
    if step is None:
        return False
    if step < below:
        return True
    logged = [k for k, v in row.items() if v not in ("", None) and k != "step"]
    return step == val_done_at and all(k.startswith("val/") for k in logged)


def keep_rows_below(path: Path, below: int, val_done_at: int | None = None) -> list[str]:
    """Rewrite metrics.csv (atomically) with only the rows written before the checkpoint, dropping
    rows a kill cut short anywhere in the file; return its header (empty when nothing is kept
    and the file is gone)."""
    if not path.is_file():
        return []
    with path.open(newline="", errors="replace") as f:
        reader = csv.DictReader(f)
        keys = list(reader.fieldnames or [])
        rows = [r for r in reader if written_before(r, below, val_done_at)]
    if not rows or "step" not in keys:
        path.unlink()
        return []
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return keys


class _ContinuingWriter(ExperimentWriter):
    def __init__(self, log_dir: str, cut: tuple[int, int | None]) -> None:
        self._cut = cut
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        # Called by the base class, whose version deletes metrics.csv; keep the earlier rows.
        self.metrics_keys = keep_rows_below(Path(self.metrics_file_path), *self._cut)


class ResumableCSVLogger(CSVLogger):
    """metrics.csv straight in ``save_dir``, continuing the rows a previous attempt wrote before
    its checkpoint: ``cut`` = (metrics_below, val_done_at); (0, None) starts a fresh file."""

    def __init__(
        self, save_dir: str | Path, cut: tuple[int, int | None] = (0, None), **kwargs: Any
    ) -> None:
        super().__init__(save_dir, name="", version="", **kwargs)
        self.cut = cut

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuingWriter(self.log_dir, self.cut)
        return self._experiment
