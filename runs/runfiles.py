"""The run directory's files, named once: every module that writes or reads a run dir (the
harness, the analysis, reproduce, the benchmarks) takes the names and the rules here, and
tests/test_layout.py refuses the literals anywhere else.

    <run_dir>/summary.json          status and results (runs/record.py writes and reads it)
    <run_dir>/metrics.csv           one sparse row per logged step (Lightning's CSV logger)
    <run_dir>/last.ckpt             the checkpoint a resume continues (+ .sha256, its digest)
    <run_dir>/probe.json            the init probe's records (python -m scripts.init_probe)
    <run_dir>/vocab.json            the tokenizer a text run trained with
    <run_dir>/.hydra/config.yaml    the composed config Hydra saved for the attempt

Also here, because every reader needs the same answer: what counts as a run dir, the one dict
flattener (nested config -> dotted keys) and the one wandb group rule. Imports neither torch nor
Lightning.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUMMARY = "summary.json"
METRICS = "metrics.csv"
CHECKPOINT = "last.ckpt"
PROBE = "probe.json"
VOCAB = "vocab.json"
HYDRA_DIR = ".hydra"
CONFIG = f"{HYDRA_DIR}/config.yaml"
HYDRA_META = f"{HYDRA_DIR}/hydra.yaml"
OVERRIDES = f"{HYDRA_DIR}/overrides.yaml"  # the job's command-line and sweep overrides

# Files of an attempt that a fresh start moves aside (training/attempt.py).
ATTEMPT_FILES = ("*.ckpt", "*.ckpt.tmp", "*.ckpt.sha256", METRICS, SUMMARY, PROBE)
# Folders inside a run dir or a sweep dir that never hold a run of their own.
NOT_RUNS = {"wandb", HYDRA_DIR, "__pycache__", "report", "checkpoints", "lightning_logs"}


def is_run_dir(path: Path) -> bool:
    """A dir holding any file a run writes first: summary.json, metrics.csv or the config."""
    return any((path / name).is_file() for name in (SUMMARY, METRICS, CONFIG))


def flatten(
    node: dict, sep: str = ".", leaf: Callable[[dict], bool] = lambda d: False, prefix: str = ""
) -> dict[str, Any]:
    """Nested dicts as {"a.b.c": value}; a dict for which ``leaf`` is true stays one value."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not leaf(value):
            out.update(flatten(value, sep, leaf, name + sep))
        else:
            out[name] = value
    return out


def wandb_group(explicit: Any, sweep_dir: str | Path | None) -> str | None:
    """A run's wandb group: an explicit ``group=``, else its sweep's (the sweep dir's last two
    parts, so every rerun or extension of a sweep lands in one group), else none."""
    if explicit:
        return str(explicit)
    if not sweep_dir:
        return None
    path = Path(sweep_dir)
    path = path if path.is_absolute() else path.resolve()
    return "sweep-" + "-".join(path.parts[-2:])


# The checkout these files are read and written by (reproduce launches its train.py; the bench
# and the run's code_version read its sources).
CHECKOUT = Path(__file__).resolve().parent.parent


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: through a temporary file, on disk (fsync) before a
    rename makes it the file, so a kill, a crash or a full disk mid-write leaves the previous
    file and no temporary one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
