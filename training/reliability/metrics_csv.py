"""metrics.csv across attempts: a resumed run keeps the rows written before its checkpoint.

Upstream limit: Lightning's CSVLogger (its ``ExperimentWriter``) deletes an existing
metrics.csv when it starts, and a kill can leave a row cut short. ``ResumableCSVLogger`` keeps
the rows a previous attempt wrote before its checkpoint (``keep_rows_below``; see
training/reliability/resume.py for which rows those are) by overriding the writer's private
``_check_log_dir_exists`` hook and the logger's ``_experiment`` / ``_fs`` attributes
(tests/training/reliability/test_library_contracts.py fails loudly if an upgrade changes them).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


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
