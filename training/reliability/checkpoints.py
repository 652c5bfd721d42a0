"""Checkpoints written whole or not at all, and read with one-line errors.

Upstream limits: Lightning's ``TorchCheckpointIO`` saves through the system temp dir and
``shutil.move``, which copies over ``last.ckpt`` in place when the temp dir is another
filesystem, so a kill or a full disk mid-save can leave a truncated file where the last good
one was; ``torch.load`` on a cut or foreign file raises a multi-line unpickling error; a full
or read-only disk surfaces as a bare ``OSError``. ``AtomicCheckpointIO`` (checkpoint_io.py, the
one Lightning piece) writes through a temporary file and a rename; ``read_checkpoint`` and
``disk_error`` turn the failures into one line naming the fix. This module needs torch only:
``model_of`` rebuilds a run's model from its checkpoint without Lightning (scripts/sample.py).

A rename makes a write whole, not the file right: a same-size corruption later (flipped bytes
on disk, a copy gone wrong) still unpickles, and resumed a run to wrong numbers. Each save
therefore records the file's SHA-256 in ``<name>.sha256`` beside it, and every load checks it:
a damaged checkpoint is refused in one line. The digest file lists the previous file's digest
too while the rename is under way, so a kill between the two writes never makes a good file
look damaged. A checkpoint without a digest file is refused too (older code's: python -m
scripts.migrate records one).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from runs.runfiles import CHECKPOINT
from training.errors import DISK_ERRNOS, DiskError, disk_message

STATE_KEY = "resume"  # ResumeCheckpoint's entry in checkpoint["callbacks"]


def disk_error(err: OSError, path: Path) -> DiskError | OSError:
    """A one-line DiskError for a full, read-only or forbidden directory; else ``err``. It says
    what is on disk: the last good checkpoint where one exists, else that none was written."""
    if err.errno not in DISK_ERRNOS:
        return err
    last = path.with_name(CHECKPOINT)
    kept = (
        f"the last good checkpoint {last.name} is intact"
        if last.is_file()
        else "no checkpoint of this run is on disk yet"
    )
    return DiskError(err.errno, disk_message(err, path, kept))


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def recorded_digests(path: Path) -> list[str]:
    """The digests recorded for ``path`` (none: no digest file, or an unreadable one)."""
    try:
        found = json.loads(digest_path(path).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [d for d in found if isinstance(d, str)] if isinstance(found, list) else []


def write_digests(path: Path, digests: list[str]) -> None:
    target = digest_path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps({"sha256": digests}) + "\n")
    os.replace(tmp, target)


class DamagedCheckpoint(ValueError):
    """The file's digest is not the one recorded when it was written."""


RESUME_FIX = (
    "resume=false starts the run fresh (the damaged file moves aside), or restore the file "
    "from a copy"
)


def verify(path: Path, fix: str = RESUME_FIX) -> None:
    """Raise DamagedCheckpoint when ``path`` differs from every digest recorded at its save, or
    when it has no digest file or one that records none (empty, cut, garbled: never a licence
    to load unchecked). Every save writes the digest before the checkpoint lands; a checkpoint
    from before digests gets one from ``python -m scripts.migrate <run dir>``."""
    recorded = recorded_digests(path)
    if not digest_path(path).exists():
        raise DamagedCheckpoint(
            f"checkpoint {path} has no digest file ({digest_path(path).name}), so it cannot be "
            f"checked; if it is a run's own from older code, python -m scripts.migrate "
            f"{path.parent} records one; else {fix}"
        )
    if not recorded:
        raise DamagedCheckpoint(
            f"checkpoint {path} cannot be checked: its digest file {digest_path(path).name} is "
            f"empty or unreadable; {fix}"
        )
    if recorded and file_digest(path) not in recorded:
        raise DamagedCheckpoint(
            f"checkpoint {path} is damaged: its SHA-256 differs from the one recorded when it "
            f"was written ({digest_path(path).name}); {fix}"
        )


def load_checkpoint(path: Path) -> dict:
    """Tensors, containers and numbers only: a crafted file cannot run code here; a file whose
    digest differs from the one written with it is refused (DamagedCheckpoint)."""
    verify(path)
    return torch.load(path, map_location="cpu", weights_only=True)


READ_FIX = "delete it or pass resume=false to start fresh"


def read_checkpoint(path: Path, fix: str = READ_FIX) -> dict:
    """The checkpoint's contents, or one line saying why it cannot be used (and ``fix``)."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist; fix ckpt_path")
    verify(path, RESUME_FIX if fix == READ_FIX else fix)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)  # verified just above
    except Exception as err:  # torch raises many types for truncated, foreign or unsafe files
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise ValueError(f"checkpoint {path} is unreadable or unsafe ({reason}); {fix}") from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        raise ValueError(f"{path} is not a training checkpoint of this project; {fix}")
    return ckpt


def model_of(ckpt: dict) -> torch.nn.Module:
    """The model a training checkpoint holds (GPT or ViT, by its saved config), its weights
    loaded strictly, without Lightning: what ``Task.load_from_checkpoint(path).model`` gives."""
    from models.config import GPTConfig, ViTConfig
    from models.gpt import GPT
    from models.vit import ViT

    config = (ckpt.get("hyper_parameters") or {}).get("model_config")
    if not isinstance(config, dict):
        raise ValueError(f"the checkpoint holds no model config; it is not a run's {CHECKPOINT}")
    model = GPT(GPTConfig(**config)) if "vocab_size" in config else ViT(ViTConfig(**config))
    prefix = "model."
    state = {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    model.load_state_dict(state)
    return model


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
