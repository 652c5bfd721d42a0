"""One error policy for every entry point: a bad setting is one line that names the fix.

``one_line_errors`` wraps a Hydra task function. A ConfigError (bad name or value, refused run
dir, full disk) ends a single run with ``error: <message>`` and exit code 1; in a sweep it is
printed, the job is recorded, and the sweep goes on. A crash keeps its traceback (in a sweep,
printed, and the sweep goes on). One debug switch for every entry point: ``NORMLAB_DEBUG=1`` shows
every traceback (train.py also reads it as ``debug=true``, and Hydra's own HYDRA_FULL_ERROR=1).
An interrupted run (SIGTERM, SIGINT) exits 128 + the signal number, as shells and SLURM expect;
a parallel sweep's worker whose sweep is gone (training/context.py's ``SWEEP_GONE``, set by
training/launch.py) exits at once, having nobody to return its outcome to.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runs.errors import ConfigError, Refused
from runs.record import Outcome
from training.context import in_multirun, sweep_gone

# What building a run raises for bad input (OSError: missing files, the hub offline).
BUILD_ERRORS = (TypeError, ValueError, OSError)


class DiskError(OSError):
    """The run dir cannot be written (full, read-only); the message names the directory and the
    fix. Raised mid-training too (a checkpoint save): one line, as a ConfigError is."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()  # the message alone, no "[Errno 28]"


# The errnos that mean "this directory cannot be written": full, read-only, forbidden.
DISK_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EPERM, errno.EFBIG)
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def disk_message(err: OSError, path: Any, kept: str = "") -> str:
    """One line for a full, read-only or forbidden directory: the file, the cause, the fix, and
    (``kept``) what is still on disk, said only where it is true."""
    path = Path(str(path if path is not None else err.filename or "?"))
    why = "is full" if err.errno in FULL else "is not writable"
    return (
        f"cannot write {path.name}: {path.parent} {why} ({os.strerror(err.errno)}); free space "
        "or fix the permissions there, or pick another dir with hydra.run.dir=... (a sweep: "
        f"hydra.sweep.dir=...){'; ' + kept if kept else ''}"
    )


def as_disk_error(err: BaseException) -> DiskError | None:
    """``err`` as a one-line DiskError when it is an OSError of a full or unwritable disk."""
    if isinstance(err, DiskError):
        return err
    if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
        return DiskError(err.errno, disk_message(err, err.filename))
    return None


class Interrupted(BaseException):
    """The run stopped on SIGTERM / SIGINT: at a step boundary with a checkpoint (during the fit),
    or wherever it was (imports, data preparation, the final validation), resumable from its
    last checkpoint. A BaseException: no ``except Exception`` on the way may swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}; the same command resumes it")
        self.signum = signum


SIGNALS = (signal.SIGTERM, signal.SIGINT)


def raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def stop_on_signals() -> dict:
    """From now on SIGTERM and SIGINT raise Interrupted wherever this process is (the fit's
    ResumeCheckpoint takes them over during training, to stop at a step boundary). A signal the
    process ignores (SIGINT in a background job) stays ignored. Returns the previous handlers.
    An Interrupted that nothing catches (before the run's own handling starts: imports, the
    command line) prints one line and exits 128 + the signal number."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        if old[s] is not signal.SIG_IGN:
            signal.signal(s, raise_interrupted)
    sys.excepthook = _interrupted_hook
    return old


def _interrupted_hook(kind, value, tb) -> None:
    if not isinstance(value, Interrupted):
        return sys.__excepthook__(kind, value, tb)
    print(f"interrupted before the run started (signal {value.signum})", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + value.signum)


@contextlib.contextmanager
def signals_interrupt():
    """``stop_on_signals`` for a block; the previous handlers (and excepthook) come back."""
    hook = sys.excepthook
    old = stop_on_signals()
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        sys.excepthook = hook


def debugging(cfg: Any = None) -> bool:
    """The one debug switch: NORMLAB_DEBUG=1, for train.py and every script alike; a train.py
    config's ``debug=true`` and Hydra's HYDRA_FULL_ERROR=1 are the same switch spelled there."""
    if os.environ.get("NORMLAB_DEBUG") == "1" or os.environ.get("HYDRA_FULL_ERROR") == "1":
        return True
    return bool(cfg.get("debug")) if cfg is not None else False


def script_errors(main: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """train.py's policy for the scripts' ``main(argv)``: bad input (a config, a missing or cut
    checkpoint, missing data) is ``error: <one line>`` and exit code 1; ``NORMLAB_DEBUG=1``
    shows the traceback."""

    @functools.wraps(main)
    def wrapper(argv: Any = None) -> Any:
        try:
            return main(argv)
        except (ConfigError, *BUILD_ERRORS, RuntimeError, KeyError) as err:
            if debugging():
                raise
            err = as_disk_error(err) or err
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            print(f"error: {first}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None

    return wrapper


def one_line_errors(task: Callable[[Any], dict]) -> Callable[[Any], dict | None]:
    """The policy above around ``task(cfg) -> outcome``; returns the outcome, or a failed one."""

    @functools.wraps(task)
    def wrapper(cfg: Any) -> dict | None:
        debug = debugging(cfg)
        sweep = in_multirun()
        try:
            return task(cfg)
        except Interrupted as err:
            print(f"interrupted: {err}", file=sys.stderr, flush=True)
            if sweep_gone():  # the worker's queue back to its sweep would block forever
                sys.stdout.flush()
                os._exit(128 + err.signum)
            raise SystemExit(128 + err.signum) from None
        except Exception as err:
            known = err if isinstance(err, ConfigError) else as_disk_error(err)
            if debug or (known is None and not sweep):
                raise
            if known is None:  # a crash: its traceback, and the sweep goes on
                traceback.print_exc()
                return {"outcome": str(Outcome.FAILED), "error": f"{type(err).__name__}: {err}"}
            if not sweep:
                raise SystemExit(f"error: {known}") from None
            print(f"error: {known}", file=sys.stderr, flush=True)
            outcome = Outcome.REFUSED if isinstance(known, Refused) else Outcome.FAILED
            return {"outcome": str(outcome), "error": str(known)}

    return wrapper
