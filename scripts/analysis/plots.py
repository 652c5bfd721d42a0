"""Plots for a sweep report, and the init-probe records they draw (probe.json or first logged).

Every figure is written only when its data exists; each returns its file name or None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from scripts.analysis.probes import Probe, depth_of, is_number, probe_groups  # noqa: E402
from scripts.analysis.variants import Variant, label  # noqa: E402


# --- figures -------------------------------------------------------------------------------------
def series_colors(labels: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {name: cmap(i % 10) for i, name in enumerate(sorted(set(labels)))}


def series_label(variant: Variant, fields: list[str]) -> str:
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
