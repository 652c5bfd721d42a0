"""The run record: how a run ended and what it measured; summary.json is its serialization.

One ``RunRecord`` per attempt, owned by the run dir (training/attempt.py). The task holds it while
it trains and every callback reports to it through its transitions:

    running --diverge(step, reason)--> diverged     (the divergence check, the task's NaN loss)
    running --interrupt(signum)------> interrupted  (SIGTERM / SIGINT; resumable from last.ckpt)
    running --complete()-------------> completed    (the fit ended with neither of the above)
    running --fail(error)------------> failed       (anything raised; the error is recorded)

A transition out of a final state is ignored, so the first outcome stands (a run that diverged
and then met a signal stays diverged). summary.json is written whatever happens, whole or not
at all, and a finished run's file is never rewritten by a later attempt that does not train.
Every reader of run dirs (resume, sweeps, analysis) reads it through ``read_summary``
and tests it against ``FINISHED``. This module imports neither torch nor Lightning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from runs.runfiles import write_atomic


class Status(str, Enum):
    """A run's status; each compares equal to its string in summary.json ("completed", ...)."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__

    RUNNING = "running"  # in memory only: an attempt's file is written once it ends
    COMPLETED = "completed"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


# A run with one of these statuses is over: a rerun into its dir skips it.
FINISHED = (Status.COMPLETED, Status.DIVERGED)


class Outcome(str, Enum):
    """What one job of a sweep did, as the sweep's status line and its readers count it: the
    status its run ended with, or one a job can have without a run of its own. Each compares
    equal to its string ("skipped", ...)."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__

    COMPLETED = "completed"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    SKIPPED = "skipped"  # its run dir held a finished run: nothing to do
    REFUSED = "refused"  # a check refused it before it trained (another writer, a changed run)
    UNFINISHED = "unfinished"  # started and never said how it ended (killed, or still running)


# Outcomes that mean the sweep did not do the work asked of it.
BAD_OUTCOMES = (Outcome.FAILED, Outcome.REFUSED, Outcome.UNFINISHED, Outcome.INTERRUPTED)


@dataclass
class RunRecord:
    """How the run ended (status and its details) and ``results``: every other summary field."""

    status: Status = Status.RUNNING
    diverged_at_step: int | None = None
    divergence_reason: str | None = None
    interrupted_by: int | None = None
    error: str | None = None
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        """Still training, or ended well: its validations are results."""
        return self.status in (Status.RUNNING, Status.COMPLETED)

    def diverge(self, step: int, reason: str | None = None) -> None:
        """Record divergence at optimizer step ``step`` (ignored once the run is over)."""
        if self.status is Status.RUNNING:
            self.status, self.diverged_at_step = Status.DIVERGED, step
            self.divergence_reason = reason

    def interrupt(self, signum: int) -> None:
        if self.healthy:
            self.status, self.interrupted_by = Status.INTERRUPTED, int(signum)

    def complete(self) -> None:
        if self.status is Status.RUNNING:
            self.status = Status.COMPLETED

    def fail(self, error: BaseException) -> None:
        if self.healthy:
            self.status, self.error = Status.FAILED, f"{type(error).__name__}: {error}"

    # --- resume: the outcome so far travels with each checkpoint ---------------------------
    def state(self) -> dict[str, Any]:
        return {"status": str(self.status), "diverged_at_step": self.diverged_at_step}

    def load_state(self, state: dict[str, Any]) -> None:
        """A checkpoint's outcome so far: diverged stays diverged; anything else was written
        while healthy and resumes running."""
        if state.get("status") == Status.DIVERGED:
            self.status, self.diverged_at_step = Status.DIVERGED, state.get("diverged_at_step")
        else:
            self.status, self.diverged_at_step = Status.RUNNING, None

    # --- summary.json ----------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The record as summary.json holds it (a run still going counts as failed there: a
        process that dies without closing its record leaves that behind)."""
        status = Status.FAILED if self.status is Status.RUNNING else self.status
        outcome = {
            "diverged_at_step": self.diverged_at_step,
            "divergence_reason": self.divergence_reason,
            "interrupted_by": self.interrupted_by,
        }
        if self.error is not None:
            outcome["error"] = self.error
        return {"status": str(status), **self.results, **outcome}

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(json_safe(self.summary()), indent=2) + "\n")


class ReportsToRecord:
    """The outcome so far, as the record its holder reports to says it."""

    record: RunRecord

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def diverged_at_step(self) -> int | None:
        return self.record.diverged_at_step


def record_of(module: Any) -> RunRecord:
    """The record a module trains under (a module built without one gets its own)."""
    if not isinstance(getattr(module, "record", None), RunRecord):
        module.record = RunRecord()
    return module.record


# --- "did not train": a completed run that learned nothing a loss can show --------------------
# A run that ends within PLATEAU_MARGIN nats of the loss a model reaches by learning only the
# label frequencies (a text run's unigram loss; chance, log of the classes, for an image run),
# or above its own loss at step 0, completed without training. Sweeps report it as such, never
# as a robust or insensitive variant (pydocs at char level: unigram ~3.26 nats; a Post-LN stack
# stalled on that plateau ends at 3.24-3.29).
PLATEAU_MARGIN = 0.1
REFERENCE_LOSSES = (("unigram_loss", "unigram loss"), ("chance_loss", "chance loss"))


def did_not_train(summary: dict[str, Any], init_loss: float | None = None) -> str | None:
    """Why a completed run did not train, in a few words, or None (it trained, or ended
    otherwise). Reads summary.json's final_val_loss, unigram_loss / chance_loss and init_loss
    (``init_loss`` stands in for an older record without it)."""
    final = summary.get("final_val_loss")
    if summary.get("status") != Status.COMPLETED or not _finite(final):
        return None
    for key, name in REFERENCE_LOSSES:
        if _finite(ref := summary.get(key)) and final >= ref - PLATEAU_MARGIN:
            where = (
                f"within {PLATEAU_MARGIN:g} of"
                if final <= ref + PLATEAU_MARGIN
                else f"{final - ref:.3g} above"
            )
            return f"ended at {final:.3f}, {where} the {name} {ref:.3f}"
    start = summary.get("init_loss", init_loss)
    if _finite(start) and final >= start:
        return f"ended at {final:.3f}, above its initial loss {start:.3f}"
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def read_summary(path: Path, on_error: Callable[[str], None] | None = None) -> dict | None:
    """The summary.json at ``path``: None when there is none (running, or killed before it was
    written), {} when it cannot be read (being written, or cut), with the reason passed to
    ``on_error``; the run then counts as unfinished."""
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as err:
        reason = f"unreadable JSON ({type(err).__name__})"
    else:
        if isinstance(summary, dict):
            return summary
        reason = "not a JSON dict"
    if on_error is not None:
        on_error(reason)
    return {}


def finished(summary: dict | None) -> bool:
    return bool(summary) and summary.get("status") in FINISHED


def json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: they are written as null."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def result_line(summary: dict) -> str:
    """The one line a finished run prints."""

    def fmt(v: Any) -> str:
        return "n/a" if v is None else f"{v:.4f}"

    acc = f" val_acc={fmt(summary['final_val_acc'])}" if "final_val_acc" in summary else ""
    bpb = f" val_bpb={fmt(summary['final_val_bpb'])}" if summary.get("final_val_bpb") else ""
    speed = ""
    for unit in ("tokens", "samples"):
        if summary.get(f"{unit}_per_s"):
            speed = f" {unit}/s={summary[f'{unit}_per_s']:,.0f}"
    mfu = f" mfu={summary['mfu']:.1%}" if summary.get("mfu") else ""
    wall = f" wall={summary['wall_s']:.1f}s" if summary.get("wall_s") else ""
    stalled = f" (did not train: {why})" if (why := summary.get("did_not_train")) else ""
    if summary["status"] == Status.DIVERGED:  # where and why, in the line itself
        step, reason = summary.get("diverged_at_step"), summary.get("divergence_reason")
        stalled = f" (at step {step}: {reason or 'no reason recorded'})"
    return (
        f"val_loss={fmt(summary['final_val_loss'])}{bpb}{acc} status={summary['status']}"
        f"{stalled}{wall}{speed}{mfu} dir={summary['run_dir']}"
    )
