"""summary.json: the one machine-readable record of a run, read by every script.

It is written whatever happens to the run (completed, diverged, interrupted, failed), whole or
not at all, and a finished run's file is never rewritten by a later attempt that does not train.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# A run with one of these statuses is over: a rerun into its dir skips it.
FINISHED = ("completed", "diverged")
# Every status a summary can hold ("interrupted": SIGTERM/SIGINT, resumable from last.ckpt).
STATUSES = (*FINISHED, "interrupted", "failed")


def base_summary(cfg: DictConfig, run_dir: Path) -> dict:
    """The fields summary.json holds whatever happens to the run."""
    summary = {
        "status": "failed",
        "name": cfg.name,
        "model": cfg.model.name,
        "placement": cfg.placement.name,
        "norm": cfg.norm.name,
        "n_layer": cfg.model.n_layer,
        "n_embd": cfg.model.n_embd,
        "lr": cfg.optim.lr,
        "warmup_steps": cfg.optim.warmup_steps,
        "seed": cfg.seed,
        "steps": 0,
        "diverged_at_step": None,
        "final_train_loss": None,
        "final_val_loss": None,
        "best_val_loss": None,
        "wall_s": None,
        "run_dir": str(run_dir),
        "params": None,
        "resumed_from_step": None,
    }
    # Values as configured, even when they are of the wrong type (the run then fails on them).
    summary = {
        k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in summary.items()
    }
    if cfg.model.name == "vit":
        summary.update(final_val_acc=None, best_val_acc=None, samples_per_s=None)
    else:
        summary.update(final_val_bpb=None, best_val_bpb=None, tokens_per_s=None)
    return summary


def json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: they are written as null."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file and a rename: a kill or a full disk mid-write
    leaves the previous file and no temporary one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_summary(path: Path, summary: dict) -> None:
    write_atomic(path, json.dumps(json_safe(summary), indent=2) + "\n")


def read_summary(path: Path) -> dict | None:
    """The summary at ``path``, or None when it is absent or unreadable (cut short by a kill)."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


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
    return (
        f"val_loss={fmt(summary['final_val_loss'])}{bpb}{acc} status={summary['status']}"
        f"{wall}{speed}{mfu} dir={summary['run_dir']}"
    )
