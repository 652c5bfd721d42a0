"""Plots for a sweep report, and the init-probe records they draw (probe.json or first logged).

Every figure is written only when its data exists; each returns its file name or None.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

if TYPE_CHECKING:
    from scripts.compare import Run, Variant, Warnings

PARAM_KEYS = ("model", "placement", "norm", "n_layer", "n_embd", "seed", "init")
# Per-layer values: "grad_norm/layer_3", "act_norm/3", "residual_norm": [..] (after flattening).
LAYER_KEY = re.compile(
    r"(?:^|/)(grad_norms?|grad|act_norms?|residual_norms?|resid_norm)/(?:layer_?)?(\d+)$"
)
LIST_NAMES = re.compile(
    r"(?:^|/)(grad_norms?|grad|act_norms?|residual_norms?|resid_norm)(?:/layers?)?$"
)


@dataclass
class Probe:
    """Per-layer norms of one model at init: gradient norm, residual-stream norm."""

    params: dict[str, Any]
    grad: list[float]
    act: list[float]
    last_fc2: float | None
    source: str


# --- probe records -------------------------------------------------------------------------------
def flat_slash(node: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts joined with "/"; a {"mean": m, "std": s} summary stands for its mean."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and "mean" in value:
            out[name] = value["mean"]
        elif isinstance(value, dict):
            out.update(flat_slash(value, name + "/"))
        else:
            out[name] = value
    return out


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_probe(record: dict, base: dict[str, Any], source: str) -> Probe | None:
    """One record: per-layer lists or layer_i keys for grad/act norms, maybe last_fc2."""
    flat = flat_slash(record)
    params = dict(base)
    params.update({k: v for k, v in record.items() if k in PARAM_KEYS or isinstance(v, str)})
    if "depth" in record and "n_layer" not in record:
        params["n_layer"] = record["depth"]
    layers: dict[str, dict[int, float]] = {"grad": {}, "act": {}}
    last_fc2 = None
    for key, value in flat.items():
        if (m := LAYER_KEY.search(key)) and is_number(value):
            kind = "grad" if m.group(1).startswith("grad") else "act"
            layers[kind][int(m.group(2))] = float(value)
        elif (m := LIST_NAMES.search(key)) and isinstance(value, list):
            kind = "grad" if m.group(1).startswith("grad") else "act"
            if all(is_number(v) for v in value):
                layers[kind].update({i: float(v) for i, v in enumerate(value)})
        elif "last_fc2" in key and "act" not in key and is_number(value):
            last_fc2 = float(value)
    grad = [layers["grad"][i] for i in sorted(layers["grad"])]
    act = [layers["act"][i] for i in sorted(layers["act"])]
    if not (grad or act or last_fc2 is not None):
        return None
    return Probe(params, grad, act, last_fc2, source)


def probe_records(data: Any) -> tuple[list[dict], dict[str, Any]]:
    """A probe.json's records (a list, a dict holding one, or one record) + shared fields."""
    if isinstance(data, list):
        return [r for r in data if isinstance(r, dict)], {}
    if not isinstance(data, dict):
        return [], {}
    for value in data.values():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            shared = {k: v for k, v in data.items() if isinstance(v, str) or k in PARAM_KEYS}
            return value, shared
    return [data], {}


def first_logged(run: Run, pattern: re.Pattern) -> list[float]:
    found = {
        int(m.group(1)): s[0][1]
        for k, s in run.metrics.items()
        if (m := pattern.fullmatch(k)) and s
    }
    return [found[i] for i in sorted(found)]


def load_probes(
    sweep_dir: Path, runs: list[Run], fields: list[str], warn: Warnings, skip: Path | None
) -> list[Probe]:
    """probe.json records anywhere below the sweep; without any, the runs' first logged norms."""
    from scripts.compare import CANONICAL, read_json

    def run_params(run: Run) -> dict[str, Any]:  # what names a variant, and the seed
        keys = [*CANONICAL, *fields]
        return {**{k: run.params.get(k) for k in keys}, "seed": run.seed}

    by_dir = {r.path: r for r in runs}
    probes: list[Probe] = []
    for path in sorted(sweep_dir.rglob("probe.json")):
        if (skip and skip.resolve() in path.resolve().parents) or "wandb" in path.parts:
            continue
        data = read_json(path, warn, types=(dict, list))
        run = by_dir.get(path.parent)
        base = run_params(run) if run else {}
        records, shared = probe_records(data)
        parsed = [parse_probe(r, {**base, **shared}, "probe.json") for r in records]
        if records and not any(parsed):
            warn.add(path, "no per-layer grad_norm/act_norm values found; ignored")
        probes += [p for p in parsed if p]
    if probes:
        return probes
    for run in runs:
        grad = first_logged(run, re.compile(r"grad_norm/layer_(\d+)"))
        act = first_logged(run, re.compile(r"act_norm/layer_(\d+)"))
        fc2 = run.metrics.get("grad_norm/last_fc2")
        if grad or act or fc2:
            probes.append(Probe(run_params(run), grad, act, fc2[0][1] if fc2 else None, "metrics"))
    return probes


def mean_lists(lists: list[list[float]]) -> list[float]:
    lists = [x for x in lists if x]
    if not lists:
        return []
    n = min(len(x) for x in lists)
    return [statistics.fmean(x[i] for x in lists) for i in range(n)]


def probe_groups(probes: list[Probe]) -> list[dict[str, Any]]:
    """Probes averaged over seeds, per set of params; 'series' labels by what varies but depth."""
    keys = sorted({k for p in probes for k in p.params if k != "seed"})
    varying = [k for k in keys if len({str(p.params.get(k)) for p in probes}) > 1]
    groups: dict[tuple, list[Probe]] = {}
    for p in probes:
        groups.setdefault(tuple(str(p.params.get(k)) for k in varying), []).append(p)
    out = []
    for members in groups.values():
        params = {k: v for k, v in members[0].params.items() if k != "seed"}
        fc2 = [p.last_fc2 for p in members if p.last_fc2 is not None]
        out.append(
            {
                "params": params,
                "series": " ".join(f"{k}={params.get(k)}" for k in varying if k != "n_layer")
                or "all",
                "seeds": sorted({str(p.params.get("seed")) for p in members}),
                "grad_norm": mean_lists([p.grad for p in members]),
                "act_norm": mean_lists([p.act for p in members]),
                "last_fc2": statistics.fmean(fc2) if fc2 else None,
                "source": members[0].source,
            }
        )
    return sorted(out, key=lambda g: (g["series"], depth_of(g["params"])))


def probe_table(probes: list[Probe]) -> list[dict[str, Any]]:
    """The init-probe section of report.json."""
    return probe_groups(probes)


def depth_of(params: dict[str, Any]) -> float:
    value = params.get("n_layer")
    return float(value) if is_number(value) else math.inf


# --- figures -------------------------------------------------------------------------------------
def series_colors(labels: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {name: cmap(i % 10) for i, name in enumerate(sorted(set(labels)))}


def series_label(variant: Variant, fields: list[str]) -> str:
    from scripts.compare import label

    return label(variant.params, [f for f in fields if f != "n_layer"])


def save(fig: plt.Figure, out_dir: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def facet_axes(n_rows: int, n_cols: int) -> tuple[plt.Figure, Any]:
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.3 * n_rows), squeeze=False)
    return fig, axes


def by_depth(variants: list[Variant]) -> dict[Any, list[Variant]]:
    depths: dict[Any, list[Variant]] = {}
    for v in sorted(variants, key=lambda v: depth_of(v.params)):
        depths.setdefault(v.params.get("n_layer"), []).append(v)
    return depths


def plot_curves(variants, fields, out_dir, metrics, name, ylabel, log_y=False) -> str | None:
    """Rows: metrics; columns: depths; one color per series, one line per run."""
    rows = [m for m in metrics if any(m in r.metrics for v in variants for r in v.runs)]
    if not rows:
        return None
    depths = by_depth(variants)
    colors = series_colors([series_label(v, fields) for v in variants])
    fig, axes = facet_axes(len(rows), len(depths))
    for col, (depth, group) in enumerate(depths.items()):
        for row, metric in enumerate(rows):
            ax, seen = axes[row][col], set()
            for v in group:
                name_ = series_label(v, fields)
                for run in v.runs:
                    points = run.metrics.get(metric, [])
                    if log_y:
                        points = [(s, y) for s, y in points if y > 0]
                    if not points:
                        continue
                    steps, values = zip(*points, strict=True)
                    style = "-" if metric.startswith("train") or len(points) > 30 else "o-"
                    ax.plot(
                        steps,
                        values,
                        style,
                        color=colors[name_],
                        lw=1,
                        ms=3,
                        alpha=0.8,
                        label=None if name_ in seen else name_,
                    )
                    seen.add(name_)
                    if run.status == "diverged" and "loss" in metric:  # where it stopped
                        ax.plot(steps[-1], values[-1], "x", color=colors[name_], ms=8, mew=2)
            if log_y:
                ax.set_yscale("log")
            else:
                clip_losses(ax, [r for v in group for r in v.runs], metric)
            ax.set_title(f"{metric}  L={depth}" if depth is not None else metric, fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel)
            if seen:
                ax.legend(fontsize=7)
    return save(fig, out_dir, name)


def clip_losses(ax, runs, metric: str) -> None:
    """Cap the y range near the loss at init, so one diverged run does not flatten the rest."""
    firsts = [r.metrics[metric][0][1] for r in runs if r.metrics.get(metric)]
    lows = [min(y for _, y in r.metrics[metric]) for r in runs if r.metrics.get(metric)]
    if firsts and lows and max(firsts) > min(lows):
        span = max(firsts) - min(lows)
        ax.set_ylim(min(lows) - 0.05 * span, max(firsts) + 0.15 * span)


def plot_best_vs_depth(variants, fields, out_dir) -> str | None:
    """Best val loss (mean ± std over completed seeds) vs depth; diverged runs as x at the top."""
    points = [v for v in variants if is_number(v.params.get("n_layer"))]
    rows = {id(v): v.row() for v in points}
    if not any(r["best_val_loss"] or r["diverged_at_steps"] for r in rows.values()):
        return None
    series: dict[str, list[Variant]] = {}
    for v in points:
        series.setdefault(series_label(v, fields), []).append(v)
    colors = series_colors(list(series))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    diverged = []  # (depth, series index, name, count): drawn once the y range is known
    for k, (name, members) in enumerate(sorted(series.items())):
        members.sort(key=lambda v: v.params["n_layer"])
        xs, ys, es = [], [], []
        for v in members:
            depth, stat = v.params["n_layer"], rows[id(v)]["best_val_loss"]
            if stat:
                xs.append(depth)
                ys.append(stat["mean"])
                es.append(stat["std"] or 0.0)
                ax.plot([depth] * stat["n"], stat["values"], ".", color=colors[name], alpha=0.4)
            if n_div := len(rows[id(v)]["diverged_at_steps"]):
                diverged.append((depth, k, name, n_div))
        if xs:
            ax.errorbar(xs, ys, yerr=es, fmt="o-", color=colors[name], capsize=3, label=name)
        else:
            ax.plot([], [], "o-", color=colors[name], label=name)
    if diverged:  # a band above the data holds the x marks: diverged runs have no loss to plot
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.2 * (high - low))
        top = ax.get_xaxis_transform()  # x in data, y in axes fraction
        for depth, k, name, n_div in diverged:
            x = depth * (1 + 0.03 * (k - (len(series) - 1) / 2))  # spread series apart
            ax.plot(x, 0.95, "x", transform=top, color=colors[name], ms=9, mew=2)
            ax.text(x, 0.87, str(n_div), transform=top, color=colors[name], ha="center", fontsize=7)
        ax.axhline(high, color="gray", lw=0.5, ls=":")
        ax.plot([], [], "x", color="gray", mew=2, label="diverged runs (count)")
    depths = sorted({v.params["n_layer"] for v in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.minorticks_off()
    ax.set_xlabel("depth (n_layer)")
    ax.set_ylabel("best val loss")
    ax.set_title("best val loss vs depth (mean ± std over completed seeds)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, out_dir, "best_val_vs_depth.png")


def plot_per_layer(
    groups, key: str, ylabel: str, out_dir: Path, name: str, with_fc2: bool
) -> str | None:
    """One panel per series, one line per depth over layer index; maybe last-FFN grad vs depth.

    The per-layer panels share one log y axis, so a flat profile looks flat next to a growing one.
    """
    fc2 = [g for g in groups if g["last_fc2"] is not None] if with_fc2 else []
    groups = [g for g in groups if g[key]]
    if not groups and not fc2:
        return None
    series = sorted({g["series"] for g in groups})
    fig, axes = facet_axes(1, len(series) + (1 if fc2 else 0))
    depths = sorted({depth_of(g["params"]) for g in groups})
    cmap = plt.get_cmap("viridis")
    for i, (ax, name_) in enumerate(zip(axes[0], series, strict=False)):
        if i:
            ax.sharey(axes[0][0])
        for g in (g for g in groups if g["series"] == name_):
            shade = 0.9 * depths.index(depth_of(g["params"])) / max(len(depths) - 1, 1)
            label = f"L={g['params'].get('n_layer')}"
            ax.plot(range(len(g[key])), g[key], "o-", ms=3, color=cmap(shade), label=label)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name_} ({groups[0]['source']})", fontsize=9)
        ax.set_xlabel("layer")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    if series:
        widen_log_range(axes[0][0])
    if fc2:
        ax = axes[0][-1]
        colors = series_colors([g["series"] for g in fc2])
        for name_ in sorted(colors):
            pts = sorted(
                (depth_of(g["params"]), g["last_fc2"]) for g in fc2 if g["series"] == name_
            )
            ax.plot(*zip(*pts, strict=True), "o-", color=colors[name_], label=name_)
        ax.set_xscale("log", base=2)
        ticks = sorted({depth_of(g["params"]) for g in fc2})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_yscale("log")
        widen_log_range(ax)
        ax.set_title("last layer FFN (fc2) grad norm at init", fontsize=9)
        ax.set_xlabel("depth (n_layer)")
        ax.legend(fontsize=7)
    return save(fig, out_dir, name)


def widen_log_range(ax, factor: float = 4.0) -> None:
    """A log axis spans at least ``factor``: float noise on a flat line must not fill the panel."""
    low, high = ax.get_ylim()
    if low > 0 and high / low < factor:
        mid = math.sqrt(low * high)
        ax.set_ylim(mid / math.sqrt(factor), mid * math.sqrt(factor))


def write_plots(
    variants: list[Variant], fields: list[str], probes: list[Probe], out_dir: Path
) -> list[str]:
    """Every plot whose data exists; returns the file names written into ``out_dir``."""
    groups = probe_groups(probes)
    makers: list[Callable[[], str | None]] = [
        lambda: plot_curves(
            variants, fields, out_dir, ["train/loss", "val/loss"], "loss_curves.png", "loss"
        ),
        lambda: plot_best_vs_depth(variants, fields, out_dir),
        lambda: plot_per_layer(
            groups, "grad_norm", "grad norm at init", out_dir, "grad_norm_init.png", True
        ),
        lambda: plot_per_layer(
            groups, "act_norm", "residual norm at init", out_dir, "act_norm_init.png", False
        ),
        lambda: plot_curves(
            variants,
            fields,
            out_dir,
            ["update/model"],
            "model_update.png",
            "||F(x,θ_t) − F(x,θ_0)||",
            log_y=True,
        ),
    ]
    return [name for make in makers if (name := make())]
