"""Sweep dir -> table and plots: ``python scripts/compare.py SWEEP_DIR [--out DIR]``.

Finds every run below SWEEP_DIR (a dir holding summary.json, metrics.csv or .hydra/config.yaml),
groups runs into variants by the config fields that vary across the sweep (never the seed), and
writes into SWEEP_DIR/report/: report.md (one table row per variant: mean ± std over seeds),
report.json (the same, machine-readable) and PNG plots of whatever data the runs logged.
Unreadable files cost one warning line each, never the report.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import plotting  # noqa: E402

# Fields every table row shows, in this order, and where a config keeps them.
CANONICAL: dict[str, tuple[str, ...]] = {
    "model": ("model.name",),
    "placement": ("placement.name", "model.placement"),
    "norm": ("norm.name", "model.norm"),
    "n_layer": ("model.n_layer",),
    "n_embd": ("model.n_embd",),
    "lr": ("optim.lr",),
    "warmup_steps": ("optim.warmup_steps",),
}
# Config keys that name or place one run rather than describe a variant.
PER_RUN_KEYS = {"seed", "name", "group", "run_dir", "ckpt_path"}
# Result fields: summary.json first, else derived from metrics.csv as (metric, reduction).
RESULTS: dict[str, tuple[str, str]] = {
    "best_val_loss": ("val/loss", "min"),
    "final_val_loss": ("val/loss", "last"),
    "final_train_loss": ("train/loss", "last"),
    "best_val_acc": ("val/acc", "max"),
    "tokens_per_s": ("throughput/tokens_per_s", "mean"),
    "samples_per_s": ("throughput/samples_per_s", "mean"),
}
RUN_FIELDS = ("status", "steps", "diverged_at_step", *RESULTS, "wall_s")
SKIP_DIRS = {"wandb", ".hydra", "__pycache__", "report", "checkpoints", "lightning_logs"}
UNFINISHED = "unfinished"

Series = list[tuple[int, float]]  # (optimizer step, value), finite values only


class Warnings(list):
    """Collects one-line warnings and echoes each to stderr."""

    def add(self, path: Path | str, reason: str) -> None:
        line = f"{path}: {reason}"
        self.append(line)
        print(f"compare: warning: {line}", file=sys.stderr)


@dataclass
class Run:
    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]  # flattened, dotted keys
    metrics: dict[str, Series]
    params: dict[str, Any] = field(default_factory=dict)  # canonical + config fields, no seed

    @property
    def status(self) -> str:
        return str(self.summary.get("status") or UNFINISHED)

    @property
    def seed(self) -> Any:
        return first_present([self.summary, self.config], ("seed",))

    def result(self, name: str) -> float | None:
        """A result from summary.json, else reduced from metrics.csv."""
        value = finite(self.summary.get(name))
        if value is None and name in RESULTS:
            metric, how = RESULTS[name]
            values = [v for _, v in self.metrics.get(metric, [])]
            if values:
                reduce = {"min": min, "max": max, "last": lambda x: x[-1]}
                value = reduce.get(how, statistics.fmean)(values)
        if value is None and name == "steps":
            steps = [s for series in self.metrics.values() for s, _ in series]
            value = max(steps) if steps else None
        return value


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


# --- loading -----------------------------------------------------------------------------------
def is_run_dir(path: Path) -> bool:
    return any((path / f).is_file() for f in ("summary.json", "metrics.csv", ".hydra/config.yaml"))


def find_run_dirs(sweep_dir: Path, skip: Path | None = None) -> list[Path]:
    """Run dirs at any depth; a run dir's own subdirs are not searched for more runs."""
    found, stack, skip = [], [sweep_dir], skip.resolve() if skip else None
    while stack:
        path = stack.pop()
        if is_run_dir(path):
            found.append(path)
            continue
        for child in sorted(path.iterdir(), reverse=True):
            if child.is_dir() and child.name not in SKIP_DIRS and child.resolve() != skip:
                stack.append(child)
    return sorted(found)


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


def read_yaml_flat(path: Path, warn: Warnings, resolve: bool = True) -> dict[str, Any]:
    """A YAML file as {dotted.key: value}; interpolations resolved where they can be."""
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf  # deferred: only runs with configs need it

    try:
        conf = OmegaConf.load(path)
        raw = OmegaConf.to_container(conf, resolve=False)
    except Exception as err:  # noqa: BLE001 - any parse failure is one warning
        warn.add(path, f"unreadable YAML ({type(err).__name__}); ignored")
        return {}
    if not isinstance(raw, dict):
        return {}
    flat = flatten(raw)
    for key, value in flat.items():
        # ${hydra:...} and the like cannot resolve outside Hydra: keep the raw text.
        if resolve and isinstance(value, str) and "${" in value:
            resolved = OmegaConf.select(conf, key, throw_on_resolution_failure=False)
            if resolved is not None and not OmegaConf.is_config(resolved):
                flat[key] = resolved
    return flat


def flatten(node: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = freeze(value)
    return out


def freeze(value: Any) -> Any:
    """Lists become tuples (nested too) so values stay hashable for grouping."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    return value


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


def to_float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def find_metrics_file(run_dir: Path) -> Path:
    direct = run_dir / "metrics.csv"
    if direct.is_file():
        return direct
    nested = [p for p in run_dir.rglob("metrics.csv") if "wandb" not in p.parts]
    return min(nested, key=lambda p: len(p.parts)) if nested else direct


def load_run(run_dir: Path, warn: Warnings) -> Run | None:
    summary_path = run_dir / "summary.json"
    summary = read_json(summary_path, warn, f"run counted as {UNFINISHED}") or {}
    config = read_yaml_flat(run_dir / ".hydra/config.yaml", warn)
    metrics = read_metrics(find_metrics_file(run_dir), warn)
    if not (summary or config or metrics):
        warn.add(run_dir, "nothing readable in this run dir; skipped")
        return None
    if not summary_path.exists():
        warn.add(run_dir, f"no summary.json (running, or killed); counted as {UNFINISHED}")
    elif summary and not summary.get("status"):
        warn.add(summary_path, f"no status field; counted as {UNFINISHED}")
    run = Run(run_dir, summary, config, metrics)
    run.params = run_params(run)
    return run


def run_params(run: Run) -> dict[str, Any]:
    """Canonical fields (summary first, then config) plus every other config field."""
    params = {
        k: first_present([run.summary, run.config], (k, *keys)) for k, keys in CANONICAL.items()
    }
    used = {key for keys in CANONICAL.values() for key in keys}
    for key, value in run.config.items():
        if key not in used and key not in PER_RUN_KEYS and not key.endswith(".seed"):
            params[key] = value
    return params


def load_runs(sweep_dir: Path, skip: Path | None = None) -> tuple[list[Run], Warnings]:
    warn = Warnings()
    runs = [r for d in find_run_dirs(sweep_dir, skip) if (r := load_run(d, warn))]
    return runs, warn


# --- variants ------------------------------------------------------------------------------------
def sort_key(value: Any) -> tuple:
    """Orders None, numbers and strings together without comparing across types."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, value, "")
    return (2, 0, str(value))


def partition(runs: list[Run], fields: list[str]) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.params.get(f) for f in fields), []).append(run)
    return groups


def seed_collisions(runs: list[Run], fields: list[str]) -> int:
    """Runs sharing a seed with another run of their group: those groups merge variants."""
    return sum(
        n - 1 for g in partition(runs, fields).values() for n in Counter(r.seed for r in g).values()
    )


def variant_fields(runs: list[Run]) -> list[str]:
    """The fields that tell variants apart: canonical ones that vary, plus the fewest others.

    Seed-derived fields (a run name ending in -s0) vary too, so other fields join only while some
    group still holds two runs with one seed; each time the field giving the coarsest split wins.
    """
    keys = sorted({k for r in runs for k in r.params})
    varying = [k for k in keys if len({r.params.get(k) for r in runs}) > 1]
    chosen = [k for k in CANONICAL if k in varying]
    others = [k for k in varying if k not in chosen]
    while others and (clash := seed_collisions(runs, chosen)):
        best = min(
            others,
            key=lambda k: (
                seed_collisions(runs, [*chosen, k]) >= clash,
                len(partition(runs, [*chosen, k])),
                k,
            ),
        )
        if seed_collisions(runs, [*chosen, best]) >= clash:
            break
        chosen.append(best)
        others.remove(best)
    return chosen


def stats(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Mean, sample std (None for one value) and n over the finite values; None if none."""
    vals = [v for v in values if finite(v) is not None]
    if not vals:
        return None
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return {"mean": statistics.fmean(vals), "std": std, "n": len(vals), "values": vals}


def label(params: dict[str, Any], fields: Iterable[str]) -> str:
    short = {"n_layer": "L", "warmup_steps": "warmup"}
    parts = [f"{short.get(f, f.split('.')[-1])}={params.get(f)}" for f in fields]
    return " ".join(parts) or "all runs"


@dataclass
class Variant:
    params: dict[str, Any]  # the canonical fields plus the variant fields
    runs: list[Run]
    label: str

    def row(self) -> dict[str, Any]:
        """This variant's report.json entry; loss and acc stats over completed runs only."""
        done = [r for r in self.runs if r.status == "completed"]
        unit = (
            "tokens_per_s" if any(r.result("tokens_per_s") for r in self.runs) else "samples_per_s"
        )
        acc = stats(r.result("best_val_acc") for r in done)
        return {
            "label": self.label,
            "params": self.params,
            "seeds": sorted({r.seed for r in self.runs}, key=sort_key),
            "n_runs": len(self.runs),
            "status_counts": dict(sorted(Counter(r.status for r in self.runs).items())),
            "best_val_loss": stats(r.result("best_val_loss") for r in done),
            "final_val_loss": stats(r.result("final_val_loss") for r in done),
            "final_train_loss": stats(r.result("final_train_loss") for r in done),
            "best_val_acc": acc,
            "diverged_at_steps": sorted(
                (r.summary.get("diverged_at_step") for r in self.runs if r.status == "diverged"),
                key=sort_key,
            ),
            "throughput": stats(r.result(unit) for r in self.runs),
            "throughput_unit": unit,
            "runs": [run_record(r) for r in sorted(self.runs, key=lambda r: sort_key(r.seed))],
        }


def run_record(run: Run) -> dict[str, Any]:
    record = {"run_dir": str(run.path), "seed": run.seed, "status": run.status}
    for name in RUN_FIELDS[1:]:
        record[name] = run.result(name) if name != "diverged_at_step" else run.summary.get(name)
    if run.summary.get("error"):
        record["error"] = run.summary["error"]
    return record


def group_variants(runs: list[Run], fields: list[str]) -> list[Variant]:
    shown = [*CANONICAL, *(f for f in fields if f not in CANONICAL)]
    variants = []
    ordered = sorted(partition(runs, fields).items(), key=lambda kv: [sort_key(v) for v in kv[0]])
    for _, group in ordered:
        params = {f: group[0].params.get(f) for f in shown}
        variants.append(Variant(params, group, label(params, fields)))
    return variants


# --- wandb -------------------------------------------------------------------------------------
def wandb_groups(runs: list[Run], sweep_dir: Path) -> list[str]:
    """The wandb group of each run, most common first (train.py's rule, read back from disk)."""
    found = Counter()
    for run in runs:
        group = first_present([run.summary], ("wandb_group", "group", "experiment"))
        group = group or first_present([run.config], ("group", "logger.wandb.group"))
        if not group:
            hydra = read_yaml_flat(run.path / ".hydra/hydra.yaml", Warnings(), resolve=False)
            group = hydra.get("hydra.runtime.choices.experiment")
            if not group and hydra.get("hydra.mode") == "MULTIRUN":
                out = hydra.get("hydra.runtime.output_dir")
                parent = Path(str(out)).parent if out and "${" not in str(out) else sweep_dir
                group = "sweep-" + "-".join(parent.parts[-2:])
        if group and "${" not in str(group):
            found[str(group)] += 1
    return [g for g, _ in found.most_common()] or [sweep_dir.resolve().name]


def wandb_sync_pattern(sweep_dir: Path) -> str | None:
    """One shell glob covering the sweep's offline wandb runs, or None if there are none."""
    dirs = [p for p in sweep_dir.rglob("offline-run-*") if p.is_dir() and p.parent.name == "wandb"]
    if not dirs:
        return None
    parts = [p.relative_to(sweep_dir).parts for p in dirs]
    if len({len(p) for p in parts}) > 1:
        return str(sweep_dir / "**" / "wandb" / "offline-run-*")
    glob = [c[0] if len(set(c)) == 1 else "*" for c in zip(*parts, strict=True)]
    glob[-1] = "offline-run-*"
    return str(sweep_dir.joinpath(*glob))


# --- report ------------------------------------------------------------------------------------
def fmt_stat(stat: dict[str, Any] | None, digits: int = 4, n_all: int | None = None) -> str:
    if not stat:
        return "–"
    text = f"{stat['mean']:.{digits}f}"
    if stat["std"] is not None:
        text += f" ± {stat['std']:.{digits}f}"
    if n_all is not None and stat["n"] != n_all:
        text += f" (n={stat['n']})"
    return text


def fmt_throughput(stat: dict[str, Any] | None, unit: str) -> str:
    if not stat:
        return "–"
    return f"{stat['mean']:,.0f} {'tok/s' if unit == 'tokens_per_s' else 'samples/s'}"


def markdown_table(report: dict[str, Any]) -> str:
    rows = report["variants"]
    extra = [f for f in report["variant_fields"] if f not in CANONICAL]
    has_acc = any(r["best_val_acc"] for r in rows)
    head = ["model", "placement", "norm", "depth", "lr", "warmup", *extra, "seeds", "status"]
    head += ["best val loss", "final val loss", *(["best val acc"] if has_acc else [])]
    head += ["diverged at step", "throughput"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p, n = r["params"], r["n_runs"]
        cells = [p["model"], p["placement"], p["norm"], p["n_layer"], p["lr"], p["warmup_steps"]]
        cells += [p.get(f) for f in extra]
        cells += [
            ",".join(map(str, r["seeds"])),
            ", ".join(f"{v} {k}" for k, v in r["status_counts"].items()),
        ]
        cells += [fmt_stat(r["best_val_loss"], n_all=n), fmt_stat(r["final_val_loss"], n_all=n)]
        cells += [fmt_stat(r["best_val_acc"], 3, n)] if has_acc else []
        cells += [", ".join(map(str, r["diverged_at_steps"])) or "–"]
        cells += [fmt_throughput(r["throughput"], r["throughput_unit"])]
        lines.append("| " + " | ".join("–" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    out = [f"# Sweep report: {report['sweep_dir']}", ""]
    out.append(
        f"{report['n_runs']} runs in {len(report['variants'])} variants; wandb group "
        f"`{', '.join(report['wandb_groups'])}`."
    )
    out += [
        "Loss and accuracy: mean ± sample std over the completed runs (n shown when fewer "
        "than the variant's runs).",
        "",
        markdown_table(report),
        "",
    ]
    out += [f"![{name}]({name})\n" for name in report["plots"]]
    if report["wandb_sync"]:
        out += [f"Upload the offline wandb runs: `wandb sync {report['wandb_sync']}`", ""]
    if report["warnings"]:
        out += ["## Warnings", "", *(f"- {w}" for w in report["warnings"]), ""]
    return "\n".join(out)


def compare(sweep_dir: str | Path, out: str | Path | None = None, plots: bool = True) -> dict:
    """Load every run below ``sweep_dir``, write report.md/report.json/plots; return the report."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SystemExit(f"compare: {sweep_dir} is not a directory; pass a sweep or run dir")
    out_dir = Path(out) if out else sweep_dir / "report"
    runs, warn = load_runs(sweep_dir, skip=out_dir)
    fields = variant_fields(runs)
    variants = group_variants(runs, fields)
    probes = plotting.load_probes(sweep_dir, runs, fields, warn, skip=out_dir)
    if not runs and not probes:
        raise SystemExit(
            f"compare: no runs under {sweep_dir} (no summary.json, metrics.csv, "
            ".hydra/config.yaml or probe.json); pass a sweep dir such as multirun/<date>/<time>"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "sweep_dir": str(sweep_dir),
        "n_runs": len(runs),
        "variant_fields": fields,
        "wandb_groups": wandb_groups(runs, sweep_dir) if runs else [sweep_dir.resolve().name],
        "wandb_sync": wandb_sync_pattern(sweep_dir),
        "variants": [v.row() for v in variants],
        "init_probe": plotting.probe_table(probes),
        "plots": plotting.write_plots(variants, fields, probes, out_dir) if plots else [],
        "warnings": list(warn),
    }
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out_dir / "report.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a Hydra multirun dir, or any dir of runs")
    parser.add_argument(
        "--out", type=Path, default=None, help="report dir (default SWEEP_DIR/report)"
    )
    parser.add_argument("--no-plots", action="store_true", help="write the tables only")
    args = parser.parse_args(argv)
    report = compare(args.sweep_dir, args.out, plots=not args.no_plots)
    out_dir = args.out or args.sweep_dir / "report"
    print(markdown_table(report) if report["variants"] else "no runs found")
    print(f"\nreport: {out_dir / 'report.md'} ({len(report['plots'])} plots)")
    print(f"wandb group to open (project normlab): {', '.join(report['wandb_groups'])}")
    if report["wandb_sync"]:
        print(f"upload offline runs: wandb sync {report['wandb_sync']}")
    else:  # logger=csv, or wandb disabled
        print(
            "no offline wandb runs here; with wandb logging on, upload them later with "
            "`wandb sync <run_dir>/wandb/offline-run-*`"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
