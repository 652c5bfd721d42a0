"""Checkpoints written whole or not at all, and read with one-line errors.

Upstream limits: Lightning's ``TorchCheckpointIO`` saves through the system temp dir and
``shutil.move``, which copies over ``last.ckpt`` in place when the temp dir is another
filesystem, so a kill or a full disk mid-save can leave a truncated file where the last good
one was; ``torch.load`` on a
cut or foreign file raises a multi-line unpickling error; a full or read-only disk surfaces as a
bare ``OSError``. ``AtomicCheckpointIO`` writes through a temporary file and a rename;
``read_checkpoint`` and ``disk_error`` turn the failures into one line naming the fix.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

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
