"""Sweep dir -> report: ``python scripts/compare.py SWEEP_DIR [--out DIR]`` (scripts/compare.py).

Finds every run below SWEEP_DIR (a dir holding summary.json, metrics.csv or .hydra/config.yaml),
groups runs into variants by the config fields that vary across the sweep (never the seed), and
writes into SWEEP_DIR/report/: report.md (one table row per variant: mean ± std over seeds),
report.json (the same, machine-readable) and PNG plots of whatever data the runs logged.
Unreadable files cost one warning line each, never the report.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from analysis import cards, init_probes, lr_sweep, transfer, xy
from analysis.html_report import caption, page
from analysis.plots import write_plots
from analysis.runs import (
    CANONICAL,
    load_runs,
)
from analysis.variants import group_variants, md_cell, md_code, poolable, variant_fields
from analysis.wandb_report import wandb_groups, wandb_sync_pattern, wandb_target
from runs import runfiles
from runs.errors import ConfigError


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


# The stability probes' per-run scalars (runs.PROBE_RESULTS): column title and digits, shown
# when some variant has them (over completed and diverged runs).
PROBE_COLUMNS = {
    "loss_spikes": ("loss spikes", 1),
    "final_sharpness": ("final sharpness", 1),
    "min_attn_entropy": ("min attn entropy", 3),
}


def status_cell(row: dict[str, Any]) -> str:
    """``2 completed, 1 diverged``; completed runs that did not train are counted apart."""
    stalled = len(row.get("did_not_train") or ())
    parts = []
    for status, n in row["status_counts"].items():
        if status == "completed" and stalled:
            parts += [f"{n - stalled} completed"] if n > stalled else []
            parts.append(f"{stalled} DID NOT TRAIN")
        else:
            parts.append(f"{n} {status}")
    return ", ".join(parts)


def stalled_warnings(report: dict[str, Any]) -> list[str]:
    """One line per variant with runs that completed without training."""
    return [
        f"{r['label']}: {len(r['did_not_train'])} of {r['n_runs']} runs did not train "
        f"({r['did_not_train'][0]}); its losses measure the plateau, not the variant"
        for r in report["variants"]
        if r.get("did_not_train")
    ]


# How the table titles a variant field (CANONICAL's short names), and how the shared line reads
# a setting every run has alike.
COLUMN_TITLES = {"n_layer": "depth", "n_embd": "width", "warmup_steps": "warmup"}
SHARED_SHOWN = ("model", "placement", "norm", "param", "n_layer", "n_embd", "lr", "warmup_steps")


def column_title(field: str, fields: list[str]) -> str:
    """A variant field's column title: its short name, or the full key where two fields of the
    sweep share a last part (``model.dropout`` beside ``optim.dropout``)."""
    if field in COLUMN_TITLES:
        return COLUMN_TITLES[field]
    last = field.rsplit(".", 1)[-1]
    return last if [f.rsplit(".", 1)[-1] for f in fields].count(last) == 1 else field


def identity_fields(report: dict[str, Any]) -> list[str]:
    """The fields whose columns tell the table's rows apart: every field the sweep varies
    (report.json's ``variant_fields``, canonical ones first); a report of one variant shows the
    canonical ones instead."""
    fields = report["variant_fields"]
    if not fields:
        return ["model", "placement", "norm", "n_layer", "lr", "warmup_steps"]
    rates = ("lr", "warmup_steps")  # last: the table reads as each variant over its rates
    first = [f for f in CANONICAL if f in fields and f not in rates]
    return [*first, *(f for f in fields if f not in CANONICAL), *(f for f in rates if f in fields)]


def shared_line(report: dict[str, Any]) -> str:
    """What every run of the sweep shares among the canonical settings the table leaves out:
    ``Every run: gpt, pre, layernorm, sp, depth 2, width 64, warmup 50.``; empty for a report of
    one variant (its columns show them)."""
    rows = report["variants"]
    if not rows or not report["variant_fields"]:
        return ""
    parts = []
    for field in SHARED_SHOWN:
        values = {str(r["params"].get(field)) for r in rows}
        if field in report["variant_fields"] or len(values) != 1 or values == {"None"}:
            continue
        (value,) = values
        title = {"lr": "lr", **COLUMN_TITLES}.get(field)  # a group's choice reads as itself
        parts.append(f"{title} {value}" if title else value)
    return f"Every run: {', '.join(parts)}." if parts else ""


def table_cells(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The variant table: its header and one row of cell texts per variant. Its first columns
    are the keys the sweep varies, so no two rows read alike in the columns shown."""
    rows = report["variants"]
    shown = identity_fields(report)
    has_acc = any(r["best_val_acc"] for r in rows)
    probed = [k for k in PROBE_COLUMNS if any(r.get(k) for r in rows)]
    head = [column_title(f, shown) for f in shown] + ["seeds", "status"]
    head += ["best val loss", "final val loss", *(["best val acc"] if has_acc else [])]
    head += ["diverged at step", "throughput", *(PROBE_COLUMNS[k][0] for k in probed)]
    table = []
    for r in rows:
        n = r["n_runs"]
        cells = [r["params"].get(f) for f in shown]
        cells += [",".join(map(str, r["seeds"])), status_cell(r)]
        cells += [fmt_stat(r["best_val_loss"], n_all=n), fmt_stat(r["final_val_loss"], n_all=n)]
        cells += [fmt_stat(r["best_val_acc"], 3, n)] if has_acc else []
        cells += [", ".join(map(str, r["diverged_at_steps"])) or "–"]
        cells += [fmt_throughput(r["throughput"], r["throughput_unit"])]
        cells += [fmt_stat(r.get(k), PROBE_COLUMNS[k][1]) for k in probed]
        table.append(["–" if c is None else str(c) for c in cells])
    return head, table


def md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(map(md_cell, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(md_cell, cells)) + " |" for cells in rows]
    return "\n".join(lines)


def markdown_table(report: dict[str, Any]) -> str:
    return md_table(*table_cells(report))


def probe_cells(groups: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The init probe's table: what it measured (series, depth, seeds), not the jobs' configs."""
    head = ["series", "depth", "seeds", "last-layer FFN grad norm", "residual norm, last layer"]
    rows = []
    for g in groups:
        fc2 = "–" if g["last_fc2"] is None else f"{g['last_fc2']:.4g}"
        act = f"{g['act_norm'][-1]:.4g}" if g.get("act_norm") else "–"
        rows.append([g["series"], str(g["params"].get("n_layer")), ",".join(g["seeds"]), fc2, act])
    return head, rows


def probe_table(groups: list[dict[str, Any]]) -> str:
    return md_table(*probe_cells(groups))


def trained(report: dict[str, Any]) -> bool:
    """Whether the sweep's runs trained (have losses), as opposed to init-probe jobs."""
    return any(v["best_val_loss"] or v["best_val_acc"] for v in report["variants"])


def group_text(report: dict[str, Any]) -> str:
    groups = report["wandb_groups"]
    return f"wandb group {md_code(', '.join(groups))}" if groups else "in no wandb group"


def markdown(report: dict[str, Any]) -> str:
    out = [f"# Sweep report: {md_code(report['sweep_dir'])}", ""]
    if report["init_probe"] and not trained(report):  # F1: forward + backward at init only
        out += [
            f"Init probe of {len(report['init_probe'])} series x depth groups (mean over "
            f"seeds); {group_text(report)}.",
            "",
            probe_table(report["init_probe"]),
            "",
        ]
        for name in report["plots"]:
            out += [f"![{name}]({name})", "", f"*{caption(name)}*" if caption(name) else "", ""]
        return "\n".join(out)
    out.append(
        f"{report['n_runs']} runs in {len(report['variants'])} variants; {group_text(report)}."
    )
    out += [
        "Loss and accuracy: mean ± sample std over the completed runs (n shown when fewer "
        "than the variant's runs).",
        *([report["shared"]] if report.get("shared") else []),
        "",
        markdown_table(report),
        "",
        *lr_sweep.markdown(report.get("lr_sweep", [])),
        *transfer.markdown(report.get("lr_sweep", [])),
    ]
    if report.get("cards"):
        inline = len(report["cards"]) <= CARDS_INLINE
        out += ["## Stability cards", ""]
        out += (
            [cards_page(report["cards"]), ""]
            if inline
            else [
                "Per run, the numbers to look at first: [cards.md](cards.md) "
                f"({len(report['cards'])} runs).",
                "",
            ]
        )
    for name in report["plots"]:
        out += [f"![{name}]({name})", "", f"*{caption(name)}*" if caption(name) else "", ""]
    if report["wandb_sync"]:
        out += [
            f"Upload the offline wandb runs: {md_code('wandb sync ' + report['wandb_sync'])}",
            "",
        ]
    if report["warnings"]:
        out += ["## Warnings", "", *(f"- {md_cell(w)}" for w in report["warnings"]), ""]
    return "\n".join(out)


CARDS_INLINE = 24  # a sweep with more runs links its cards (cards.md) instead


def cards_page(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        [
            "Per run, the numbers to look at first (analysis/cards.py says where each comes "
            "from; a probe that did not run leaves its column out).",
            "",
            md_table(*cards.cells(rows)),
        ]
    )


# The figures that answer a sweep's question come first: its loss against the lr (an lr sweep),
# against depth (a depth sweep), the curves over training; the per-metric figures after them,
# the per-layer heat maps last.
QUESTION_ORDER = ("lr_sensitivity.png", "best_val_vs_depth.png", "init_grid.png", "loss_curves.png")


def question_first(name: str) -> tuple[int, int]:
    if name in QUESTION_ORDER:
        return 0, QUESTION_ORDER.index(name)
    return (2, 0) if name.startswith("heat_") else (1, 0)


@contextlib.contextmanager
def writing_into(out_dir: Path) -> Iterator[None]:
    """A read-only sweep dir or a full disk while the report is written: one line, no
    traceback."""
    try:
        yield
    except OSError as err:
        raise ConfigError(
            f"cannot write the report into {out_dir} ({err.strerror or err}); free "
            "space or pass --out <a writable dir>"
        ) from None


def write_report(
    sweep_dir: str | Path, out: str | Path | None = None, plots: bool = True, logy: bool = False
) -> dict:
    """Load every run below ``sweep_dir``, write report.md/report.json/plots; return the report."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ConfigError(f"{sweep_dir} is not a directory; pass a sweep or run dir")
    out_dir = Path(out) if out else sweep_dir / "report"
    runs, warn = load_runs(sweep_dir, skip=out_dir)
    runs, fields, left_out = poolable(runs, variant_fields(runs))
    found = init_probes.load_probes(sweep_dir, runs, fields, warn, skip=out_dir)
    if not runs and not found:
        raise ConfigError(
            f"no runs under {sweep_dir} (no summary.json, metrics.csv, "
            ".hydra/config.yaml or probe.json); pass a sweep dir such as multirun/<date>/<time>"
        )
    with writing_into(out_dir):
        variants = group_variants(runs, fields)
        out_dir.mkdir(parents=True, exist_ok=True)
        report = {
            "sweep_dir": str(sweep_dir),
            "n_runs": len(runs),
            "variant_fields": fields,
            "wandb_groups": wandb_groups(runs, sweep_dir) if runs else [],
            "wandb_sync": wandb_sync_pattern(sweep_dir, skip=out_dir),
            "wandb": wandb_target(runs),  # where the runs logged: the report run goes there too
            "variants": [v.row() for v in variants],
            "lr_sweep": lr_sweep.lr_sweep(variants, fields),
            "init_probe": init_probes.probe_groups(found),
            "cards": cards.cards(runs, sweep_dir),  # each run's stability card
            "plots": [],
            "left_out": left_out,  # runs not pooled (a repeated seed), variants mixing code
            "warnings": [*warn, *left_out],
        }
        report["warnings"] += stalled_warnings(report)
        report["shared"] = shared_line(report)  # the settings no column shows
        key = plots_key(sweep_dir, out_dir, logy)
        if plots and (drawn := drawn_before(out_dir, key)) is not None:
            report["plots"] = drawn  # nothing they draw from changed: not drawn again
        elif plots:
            report["plots"] = write_plots(variants, fields, found, out_dir, logy)
            for draw in (lr_sweep.plot, transfer.plot):
                if name := draw(report["lr_sweep"], out_dir):
                    report["plots"].append(name)
            (out_dir / PLOTS_KEY).write_text(key + "\n")
        else:  # this report lists no figures: the next one draws them
            (out_dir / PLOTS_KEY).unlink(missing_ok=True)
        report["plots"].sort(key=question_first)
        (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (out_dir / "report.md").write_text(markdown(report))
        if report["cards"]:
            (out_dir / "cards.md").write_text(
                f"# Stability cards\n\n{cards_page(report['cards'])}\n"
            )
        probed = report["init_probe"] and not trained(report)
        cells = probe_cells(report["init_probe"]) if probed else table_cells(report)
        (out_dir / "report.html").write_text(page(report, cells, out_dir))
        return report


# --- figures drawn once per input -----------------------------------------------------------
PLOTS_KEY = ".plots_key"  # in the report dir: what its figures were drawn from
RUN_FILES = (runfiles.SUMMARY, runfiles.METRICS, runfiles.PROBE, "config.yaml")


def plots_key(sweep_dir: Path, out_dir: Path, logy: bool) -> str:
    """A digest of everything the figures are drawn from: each run file's path, size and
    modification time below the sweep (the report dir left out), the axis choice, and the
    analysis code that draws them."""
    h = hashlib.sha256(f"logy={logy}".encode())
    found = (p for p in sweep_dir.rglob("*") if p.name in RUN_FILES)  # one walk of the sweep
    for path in sorted(p for p in found if p.is_file() and not p.is_relative_to(out_dir)):
        stat = path.stat()
        h.update(f"{path.relative_to(sweep_dir)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for code in sorted(Path(__file__).parent.glob("*.py")):
        h.update(code.read_bytes())
    return h.hexdigest()


def drawn_before(out_dir: Path, key: str) -> list[str] | None:
    """The figures of the last report in ``out_dir`` when they were drawn from the same inputs
    (``key``) and are all still there; None: draw them."""
    try:
        same = (out_dir / PLOTS_KEY).read_text().strip() == key
        names = json.loads((out_dir / "report.json").read_text())["plots"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if same and isinstance(names, list) and all((out_dir / str(n)).is_file() for n in names):
        return [str(n) for n in names]
    return None


def xy_figure(
    sweep_dir: str | Path, x: str, ys: list[str], out: str | Path | None = None, name=None
) -> Path:
    """``ys`` against swept key ``x`` (analysis/xy.py) into the report dir; its path.
    A key the sweep does not vary, or a y no run has, is a ConfigError (one line)."""
    sweep_dir = Path(sweep_dir)
    out_dir = Path(out) if out else sweep_dir / "report"
    runs, _ = load_runs(sweep_dir, skip=out_dir)
    runs, fields, _ = poolable(runs, variant_fields(runs))
    variants = group_variants(runs, fields)
    try:
        written = xy.plot_xy(variants, fields, xy.resolve_key(x, variants), ys, out_dir, name)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if written is None:
        raise ConfigError(
            f"no run has {','.join(ys)}; pass a summary field such as best_val_loss "
            "or how:metric such as max:attn/max_logit"
        )
    return out_dir / written
