"""Reading run dirs: the leaf every other analysis module imports (it imports none of them).

A run dir holds any of summary.json (status and results), metrics.csv (Lightning's CSVLogger,
one sparse row per logged step), .hydra/config.yaml (the composed config) and probe.json (the
init probe). Readers here never raise on a bad file: each unreadable file costs one warning line.

The run dir's file names, what counts as a run dir and the one dict flattener are the run-dir
contract's (runs/runfiles.py); the statuses a run can end in and the summary reader are the run
record's (runs/record.py): the definitions train.py writes with, read here.
"""

from __future__ import annotations

import csv
import fnmatch
import functools
import json
import math
import re
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs import record, runfiles
from runs.record import Outcome
from runs.runfiles import flatten
from runs.settings import is_operational, older_layout
from runs.summary import metric_fields

# A run that ran to its end (completed, or stopped by the divergence check) is FINISHED, defined
# once with the record train.py writes; a failed run (config error, crash) says nothing about
# the variant.
UNFINISHED = str(Outcome.UNFINISHED)

# Fields every table row shows, in this order, and where a config keeps them.
CANONICAL: dict[str, tuple[str, ...]] = {
    "model": ("model.name",),
    "placement": ("placement.name",),
    "norm": ("norm.name",),
    "param": ("param.name",),
    "n_layer": ("model.n_layer",),
    "n_embd": ("model.n_embd",),
    "lr": ("optim.lr",),
    "warmup_steps": ("optim.warmup_steps",),
}
# Config keys that name or place one run rather than describe a variant.
PER_RUN_KEYS = {"seed", "name", "group", "run_dir", "ckpt_path"}
# Result fields, in the report's column order: summary.json first, else derived from
# metrics.csv as (metric, reduction), each declared in runs/summary.py.
RESULTS: dict[str, tuple[str, str]] = {
    name: metric_fields()[name]
    for name in ("best_val_loss", "final_val_loss", "final_train_loss", "best_val_acc")
    + ("tokens_per_s", "samples_per_s")
}
# Per-run scalars of the stability probes (training/probes/), read the same way; a metric name
# with "*" pools every series it matches (e.g. every layer's).
PROBE_RESULTS: dict[str, tuple[str, str]] = metric_fields(probe=True)
RESULTS.update(PROBE_RESULTS)
RUN_FIELDS = ("status", "steps", "diverged_at_step", *RESULTS, "wall_s")
SKIP_DIRS = runfiles.NOT_RUNS

Series = list[tuple[int, float]]  # (optimizer step, value), finite values only


class Warnings(list):
    """Collects one-line warnings and echoes each to stderr (``quiet``: collect only)."""

    def __init__(self, quiet: bool = False) -> None:
        super().__init__()
        self.quiet = quiet

    def add(self, path: Path | str, reason: str) -> None:
        line = f"{path}: {reason}"
        self.append(line)
        if not self.quiet:
            print(f"compare: warning: {line}", file=sys.stderr)


# --- values --------------------------------------------------------------------------------------
def finite(value: Any) -> float | None:
    """A finite number, else None (JSON has no NaN; a diverged loss is no result)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def first_present(sources: Iterable[dict], keys: Iterable[str]) -> Any:
    for source in sources:
        for key in keys:
            if source.get(key) is not None:
                return source[key]
    return None


def freeze(value: Any) -> Any:
    """Lists become tuples (nested too) so values stay hashable for grouping."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    return value


# --- files ---------------------------------------------------------------------------------------
def read_json(path: Path, warn: Warnings, effect: str = "ignored", types: tuple = (dict,)) -> Any:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as err:
        warn.add(path, f"unreadable JSON ({type(err).__name__}); {effect}")
        return None
    if not isinstance(data, types):
        warn.add(path, f"not a JSON {' or '.join(t.__name__ for t in types)}; {effect}")
        return None
    return data


def run_summary(run_dir: Path, warn: Warnings | None = None) -> dict[str, Any] | None:
    """A run's summary.json: None when there is none (running, or killed before writing it),
    {} when it cannot be read (being written, or cut); the run then counts as unfinished."""
    path = run_dir / runfiles.SUMMARY
    warn = Warnings(quiet=True) if warn is None else warn  # an empty Warnings is falsy
    return record.read_summary(
        path, lambda why: warn.add(path, f"{why}; run counted as {UNFINISHED}")
    )


def status_of(summary: dict[str, Any] | None) -> str:
    return str((summary or {}).get("status") or UNFINISHED)


# Resolvers a reader may run on a run dir's config: pure functions of the file's own values.
# Any other (oc.env, now, hydra, ...) would put the reader's environment into a report.
SAFE_RESOLVERS = {"oc.decode", "oc.select"}
RESOLVER_CALL = re.compile(r"\$\{\s*([\w.]+)\s*:")


def _fenced(node: Any) -> Any:
    """``node`` with every string that calls an unsafe resolver escaped into plain text."""
    if isinstance(node, dict):
        return {k: _fenced(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_fenced(v) for v in node]
    if isinstance(node, str) and any(
        name not in SAFE_RESOLVERS for name in RESOLVER_CALL.findall(node)
    ):
        return node.replace("${", "\\${")
    return node


def read_yaml_flat(path: Path, warn: Warnings, resolve: bool = True) -> dict[str, Any]:
    """A YAML file as {dotted.key: value}; references to the file's own keys resolved where they
    can be, and no resolver that reads the environment, the clock or Hydra ever run."""
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf  # deferred: only runs with configs need it

    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as err:  # noqa: BLE001 - any parse failure is one warning
        warn.add(path, f"unreadable YAML ({type(err).__name__}); ignored")
        return {}
    if not isinstance(raw, dict):
        return {}
    flat = {k: freeze(v) for k, v in flatten(raw).items()}
    if not resolve:
        return flat
    conf = OmegaConf.create(_fenced(raw))
    for key, value in flat.items():
        if isinstance(value, str) and "${" in value:
            try:
                resolved = OmegaConf.select(conf, key, throw_on_resolution_failure=False)
            except Exception:  # noqa: BLE001 - an unresolvable value keeps its raw text
                continue
            if resolved is not None and not OmegaConf.is_config(resolved):
                flat[key] = freeze(resolved)
    return flat


def to_float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def read_metrics(path: Path, warn: Warnings) -> dict[str, Series]:
    """Lightning CSVLogger file -> {metric: [(step, value)]}; empty cells are skipped."""
    if not path.is_file():
        return {}
    try:
        with path.open(newline="", errors="replace") as f:
            rows = list(csv.reader(f))
    except (OSError, csv.Error) as err:
        warn.add(path, f"unreadable CSV ({type(err).__name__}); ignored")
        return {}
    if not rows or not rows[0]:
        warn.add(path, "empty metrics file; ignored")
        return {}
    header, series = rows[0], {}
    step_col = header.index("step") if "step" in header else None
    for i, row in enumerate(rows[1:]):
        step = to_float(row[step_col]) if step_col is not None and step_col < len(row) else i
        if step is None:
            continue
        for name, cell in zip(header, row, strict=False):
            value = to_float(cell)
            if name not in ("step", "epoch") and value is not None and math.isfinite(value):
                series.setdefault(name, []).append((int(step), value))
    for values in series.values():
        values.sort(key=lambda sv: sv[0])
    return series


def find_metrics_file(run_dir: Path) -> Path:
    direct = run_dir / runfiles.METRICS
    if direct.is_file():
        return direct
    nested = [p for p in run_dir.rglob(runfiles.METRICS) if "wandb" not in p.parts]
    return min(nested, key=lambda p: len(p.parts)) if nested else direct


def run_series(run_dir: str | Path, metric: str) -> Series:
    """One metric of one run, read from its metrics.csv (silently empty when absent)."""
    path = find_metrics_file(Path(run_dir))
    return read_metrics(path, Warnings(quiet=True)).get(metric, [])


# --- runs ----------------------------------------------------------------------------------------
@dataclass
class Run:
    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]  # flattened, dotted keys
    metrics: dict[str, Series]
    params: dict[str, Any] = field(default_factory=dict)  # canonical + config fields, no seed

    @property
    def status(self) -> str:
        return status_of(self.summary)

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """Every setting that changes this run's numbers but its seed: the ``run_config`` its
        summary.json records, else its config less the operational keys; per-run keys left out."""
        recorded = self.summary.get("run_config")
        source = recorded if isinstance(recorded, dict) else self.config
        return {
            k: freeze(v)
            for k, v in source.items()
            if k not in PER_RUN_KEYS and not k.endswith(".seed") and not is_operational(k)
        }

    @property
    def seed(self) -> Any:
        return first_present([self.summary, self.config], ("seed",))

    @property
    def did_not_train(self) -> str | None:
        """Why this completed run did not train (runs/record.did_not_train), or None; an
        older summary.json without the field is judged from its metrics.csv's first loss."""
        if "did_not_train" in self.summary:
            return self.summary["did_not_train"] or None
        first = self.metrics.get("train/loss")
        return record.did_not_train(self.summary, first[0][1] if first else None)

    def result(self, name: str) -> float | None:
        """A result from summary.json, else reduced from metrics.csv."""
        value = finite(self.summary.get(name))
        if value is None and name in RESULTS:
            metric, how = RESULTS[name]
            names = fnmatch.filter(self.metrics, metric) if "*" in metric else [metric]
            values = [v for m in names for _, v in self.metrics.get(m, [])]
            if values:
                reduce = {"min": min, "max": max, "last": lambda x: x[-1]}
                value = reduce.get(how, statistics.fmean)(values)
        if value is None and name == "steps":
            steps = [s for series in self.metrics.values() for s, _ in series]
            value = max(steps) if steps else None
        return value


is_run_dir = runfiles.is_run_dir


def find_run_dirs(sweep_dir: Path, skip: Path | None = None) -> list[Path]:
    """Run dirs at any depth, each once: a run reached through symlinks (a ``latest`` link, a
    loop) is the same run, identified by its real path and listed under the path that has no
    link in it where there is one. A run dir's own subdirs are not searched for more runs."""
    found: dict[Path, Path] = {}
    seen, stack, skip = set(), [sweep_dir], skip.resolve() if skip else None
    while stack:
        path = stack.pop()
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        if is_run_dir(path):
            found[real] = path
            continue
        for child in sorted(path.iterdir(), reverse=True):
            if child.is_dir() and child.name not in SKIP_DIRS and child.resolve() != skip:
                stack.append(child)
    # A real path under the sweep dir is listed under it, not under a link that reached it first.
    root = sweep_dir.resolve()
    return sorted(
        sweep_dir / real.relative_to(root) if real.is_relative_to(root) else path
        for real, path in found.items()
    )


def load_run(run_dir: Path, warn: Warnings) -> Run | None:
    summary = run_summary(run_dir, warn)
    config = read_yaml_flat(run_dir / runfiles.CONFIG, warn)
    metrics = read_metrics(find_metrics_file(run_dir), warn)
    if not (summary or config or metrics):
        warn.add(run_dir, "nothing readable in this run dir; skipped")
        return None
    if summary is None:
        warn.add(run_dir, f"no summary.json (running, or killed); counted as {UNFINISHED}")
    elif summary and not summary.get("status"):
        warn.add(run_dir / runfiles.SUMMARY, f"no status field; counted as {UNFINISHED}")
    run = Run(run_dir, summary or {}, config, metrics)
    if old := older_layout(run.settings):  # its keys name other settings: never pooled
        warn.add(run_dir, f"an older record layout ({', '.join(old)}); left out: run python -m "
                          f"scripts.migrate {run_dir} first")  # fmt: skip
        return None
    run.params = run_params(run)
    return run


def run_params(run: Run) -> dict[str, Any]:
    """Canonical fields (summary first, then config) plus every other config field."""
    params = {
        k: freeze(first_present([run.summary, run.config], (k, *keys)))
        for k, keys in CANONICAL.items()
    }
    if params["param"] is None:  # a run from before the param group was SP
        params["param"] = "sp"
    used = {key for keys in CANONICAL.values() for key in keys}
    for key, value in run.config.items():
        if key not in used and key not in PER_RUN_KEYS and not key.endswith(".seed"):
            params[key] = value
    for key, value in run.settings.items():  # recorded settings the config file lacks
        if key not in used:
            params.setdefault(key, value)
    return params


def load_runs(sweep_dir: Path, skip: Path | None = None) -> tuple[list[Run], Warnings]:
    warn = Warnings()
    runs = [r for d in find_run_dirs(sweep_dir, skip) if (r := load_run(d, warn))]
    return runs, warn
