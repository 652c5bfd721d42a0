"""Resuming a run in its own directory: atomic periodic checkpoints and gap-free metrics.

Running the same command into the same run dir again picks up where the last attempt stopped:

    summary.json says completed or diverged   -> skipped: its summary is returned, nothing runs
    last.ckpt exists                          -> the fit continues from it
    otherwise                                 -> the fit starts at step 0

``resume=false`` starts fresh instead: the old attempt's checkpoints, metrics.csv and summary.json
move to ``<run_dir>/checkpoints/superseded-<time>/`` first. A run dir remembers the config that
produced it (summary.json and every checkpoint hold it); resuming or skipping with a config that
would change the result fails with the differing keys named, instead of mixing two runs.

Metrics: a checkpoint taken at optimizer step G is written after every metric row of steps < G
(the tasks and probes log a step's rows before its ``on_train_batch_end``, and the loggers are
flushed just before the write) and before any row of step > G. When a validation runs at G, the
checkpoint waits for it (Lightning's resume skips a validation that was due at the checkpoint's
step), so its val rows at G are on disk too. A resumed run keeps exactly the metrics.csv rows
written before its checkpoint, by the rule ``step < metrics_below``, plus the val rows at G when
``val_done_at`` is G (the final checkpoint, after the final validation, has metrics_below
G + 1), and logs the rest again: rows that the killed attempt wrote after its checkpoint are
superseded, never duplicated, and no step goes missing.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

FINISHED = ("completed", "diverged")
CHECKPOINT = "last.ckpt"
# Files of an attempt that resume=false moves aside (compare.py skips checkpoints/).
ATTEMPT_FILES = ("*.ckpt", "*.ckpt.tmp", "metrics.csv", "summary.json", "probe.json")
# Config keys that do not change a run's result: they may differ between attempts.
OPERATIONAL = (
    "run_dir",
    "name",
    "group",
    "resume",
    "ckpt_path",
    "debug",
    "num_threads",
    "compile",
    "logger",
    "checkpoint",
    "probes",
    "reproduce",  # experiments' verdict settings: judged after the runs, not part of them
    "trainer.accelerator",
    "trainer.strategy",
    "trainer.precision",
    "trainer.deterministic",
    "trainer.benchmark",
    "trainer.detect_anomaly",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.enable_checkpointing",
    "trainer.log_every_n_steps",
)


# --- writing checkpoints ----------------------------------------------------------------------
class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes ``<path>.tmp`` next to the target, fsyncs it, then renames it over the target.

    A kill at any moment leaves either the old checkpoint or the new one. (Lightning's own save
    goes through a temp file in the system temp dir and ``shutil.move``, which copies in place
    when that dir is on another filesystem, and holds the whole checkpoint in memory twice.)
    """

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


class PeriodicCheckpoint(Checkpoint):
    """``last.ckpt`` every ``every_n_steps`` optimizer steps, and also once ``every_s`` seconds
    have passed since the last write (None: steps only).

    Written at the end of a step's batch, after the loggers are flushed. Not at the last step
    (the entry point saves the final weights after their validation) and not once the run is
    stopping (a diverged run leaves no checkpoint that looks like a good model). It exposes
    ``last_model_path`` like ModelCheckpoint, so the Divergence callback can set it aside.
    """

    def __init__(self, path: str | Path, every_n_steps: int, every_s: float | None = None):
        self.path = str(path)
        self.every_n_steps, self.every_s = every_n_steps, every_s
        self.last_model_path = ""
        self.best_model_path = ""
        self.best_k_models: dict[str, Any] = {}
        self._saved_step = -1
        self._after_validation = False
        self._last_save = time.monotonic()

    def on_train_start(self, trainer, pl_module) -> None:
        self._last_save = time.monotonic()
        self._saved_step = trainer.global_step  # a resumed run's starting point is saved already

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
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
            if trainer.state.fn == "fit" and not trainer.should_stop:
                self.save(trainer, val_done=True)

    def save(self, trainer, val_done: bool = False) -> None:
        step = trainer.global_step
        task = trainer.lightning_module
        task.metrics_below, task.val_done_at = step, (step if val_done else None)
        for logger in trainer.loggers:  # rows of earlier steps reach the disk before the checkpoint
            logger.save()
        trainer.save_checkpoint(self.path, weights_only=False)
        self.last_model_path, self._saved_step = self.path, step
        self._last_save = time.monotonic()


def validation_follows(trainer) -> bool:
    """Whether the fit loop validates right after this batch (its own rule, read in place)."""
    loop = trainer.fit_loop
    try:
        return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))
    except Exception:  # a Lightning without this rule: save now (a resume skips that validation)
        return False


def default_every_n_steps(max_steps: int) -> int:
    """A tenth of the run: a kill loses at most ~10% of it (every_s bounds the time lost)."""
    return max(1, max_steps // 10)


# --- metrics.csv across attempts -----------------------------------------------------------
def written_before(row: dict[str, str], below: int, val_done_at: int | None) -> bool:
    """Whether a metrics.csv row was on disk before the checkpoint (see the module docstring)."""
    step = int(float(row["step"]))
    if step < below:
        return True
    logged = [k for k, v in row.items() if v not in ("", None) and k != "step"]
    return step == val_done_at and all(k.startswith("val/") for k in logged)


def keep_rows_below(path: Path, below: int, val_done_at: int | None = None) -> list[str]:
    """Rewrite metrics.csv (atomically) with only the rows written before the checkpoint;
    return its header (empty when nothing is kept and the file is gone)."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        keys = list(reader.fieldnames or [])
        rows = [r for r in reader if (r.get("step") or "").strip()]
        rows = [r for r in rows if written_before(r, below, val_done_at)]
    if not rows:
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


# --- what a run dir holds, and what to do with it -------------------------------------------
@dataclass
class ResumePlan:
    finished: dict | None = None  # a finished run's summary: skip
    ckpt_path: Path | None = None  # continue from this checkpoint
    ckpt: dict | None = None  # its contents (read up front: a bad file fails in seconds)

    @property
    def start_step(self) -> int | None:
        return None if self.ckpt is None else int(self.ckpt["global_step"])

    @property
    def metrics_cut(self) -> tuple[int, int | None]:
        """(metrics_below, val_done_at): which metrics.csv rows predate the checkpoint."""
        if self.ckpt is None:
            return 0, None
        task = self.ckpt.get("normlab_task", {})
        return int(task.get("metrics_below") or self.ckpt["global_step"]), task.get("val_done_at")


def flat_config(node: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def result_config(config: dict) -> dict[str, Any]:
    """The flattened config minus the keys that leave the result unchanged."""
    flat = flat_config({k: v for k, v in config.items() if k != "hydra"})
    skip = tuple(OPERATIONAL)
    return {k: v for k, v in flat.items() if not any(k == s or k.startswith(s + ".") for s in skip)}


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each key whose value differs (absent keys show as missing)."""
    missing = "<missing>"
    keys = sorted(set(old) | set(new))
    changes = [
        k for k in keys if json.dumps(old.get(k, missing)) != json.dumps(new.get(k, missing))
    ]
    return [f"{k}: {old.get(k, missing)} -> {new.get(k, missing)}" for k in changes]


def check_same_config(where: str, old: dict | None, new: dict[str, Any]) -> None:
    if old is None:  # written before run dirs recorded their config
        return
    changes = config_changes(old, new)
    if changes:
        shown = "; ".join(changes[:3]) + (
            f"; and {len(changes) - 3} more" if len(changes) > 3 else ""
        )
        raise ValueError(
            f"{where} was written with other settings ({shown}); rerun with the same settings, "
            "pick another run dir (hydra.run.dir=... / hydra.sweep.dir=...), "
            "or pass resume=false to start fresh there"
        )


def read_checkpoint(path: Path) -> dict:
    """The checkpoint's contents, or one line saying why it cannot be resumed from."""
    fix = "delete it or pass resume=false to start fresh"
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist; fix ckpt_path")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises many types for a truncated or foreign file
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise ValueError(f"checkpoint {path} is unreadable ({reason}); {fix}") from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        raise ValueError(f"{path} is not a training checkpoint of this project; {fix}")
    return ckpt


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


def read_summary(path: Path) -> dict | None:
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):  # absent, or cut short by a kill: not a finished run
        return None
    return summary if isinstance(summary, dict) else None


def plan_resume(
    run_dir: Path, resume: bool, ckpt_path: str | None, config: dict[str, Any]
) -> ResumePlan:
    """What this attempt does with ``run_dir``: skip it, continue from a checkpoint, or start.

    An explicit ``ckpt_path`` is always resumed from (checked, not compared with the config: it
    may come from another run). Raises ValueError (one line) for an unreadable checkpoint or a
    run dir written with settings that would change the result.
    """
    if ckpt_path:
        path = Path(ckpt_path)
        return ResumePlan(ckpt_path=path, ckpt=read_checkpoint(path))
    if not resume:
        return ResumePlan()
    summary = read_summary(run_dir / "summary.json")
    if summary is not None and summary.get("status") in FINISHED:
        where = f"{run_dir} (a {summary['status']} run)"
        check_same_config(where, summary.get("run_config"), config)
        return ResumePlan(finished=summary)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        return ResumePlan()
    ckpt = read_checkpoint(path)
    check_same_config(f"checkpoint {path}", ckpt.get("normlab_task", {}).get("run_config"), config)
    return ResumePlan(ckpt_path=path, ckpt=ckpt)


def set_aside(run_dir: Path) -> Path | None:
    """Move a previous attempt's files to checkpoints/superseded-<time>/ (resume=false)."""
    found = sorted({p for pattern in ATTEMPT_FILES for p in run_dir.glob(pattern) if p.is_file()})
    if not found:
        return None
    dest = run_dir / "checkpoints" / time.strftime("superseded-%Y%m%d-%H%M%S")
    dest.mkdir(parents=True, exist_ok=True)
    for path in found:
        shutil.move(str(path), dest / path.name)
    return dest


def wandb_run_id(run_dir: Path) -> str | None:
    """The id of the latest wandb run in ``run_dir`` (``<mode>-run-<time>-<id>`` dirs)."""
    runs = sorted(p.name for p in (run_dir / "wandb").glob("*run-*-*") if p.is_dir())
    return runs[-1].rsplit("-", 1)[-1] if runs else None
