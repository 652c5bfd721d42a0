"""A sweep report's figures: curves over training steps (the per-layer norms at initialization
are analysis/init_figures.py's).

Every curve is one line per variant: the mean over its seeds with a band of ± one sample std
(seeds interpolated onto the union of their logged steps; a run stops counting where its log
ends, so a diverged run leaves the mean there and gets an x at its last point). Train loss is
smoothed with a debiased exponential moving average whose time constant is written in the axis
label; each run's raw points stay in the background, faint. The legend sits outside the data.
Every figure is written only when its data exists; each maker returns its file name or None.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import ScalarFormatter  # noqa: E402

from analysis import xy  # noqa: E402
from analysis.heatmaps import write_heatmaps  # noqa: E402
from analysis.init_figures import plot_init_grid, plot_per_layer  # noqa: E402
from analysis.init_probes import Probe, depth_of, probe_groups  # noqa: E402
from analysis.runs import Series  # noqa: E402
from analysis.variants import Variant, sort_key  # noqa: E402
from analysis.xy import (  # noqa: E402
    LINESTYLES,
    colour_label,
    variant_colors,
)
from runs import metric_names as names  # noqa: E402

EMA_POINTS = 25  # the EMA time constant: 1/25 of the longest run's step span
SMOOTHED = ("train/loss",)  # noisy per-batch values; val loss is one fixed set, drawn as is
FEW_POINTS = 4  # a curve with fewer logged points is drawn as points, without a line


# --- one variant's curve -------------------------------------------------------------------------
def ema(points: Series, tau: float) -> Series:
    """Debiased exponential moving average with a time constant of ``tau`` steps:
    s(t_i) = sum_{j<=i} w_ij x_j / sum_{j<=i} w_ij,  w_ij = exp(-(t_i - t_j) / tau),
    so uneven logging intervals weigh by elapsed steps and the first point is not pulled to 0."""
    out, num, den, last = [], 0.0, 0.0, None
    for step, value in points:
        decay = math.exp(-(step - last) / tau) if last is not None else 0.0
        num, den, last = decay * num + value, decay * den + 1.0, step
        out.append((step, num / den))
    return out


def seed_band(series: list[Series], log: bool = False) -> tuple[np.ndarray, ...]:
    """(steps, mean, std, n) over runs on the union of their steps; each run linearly
    interpolated between its own first and last logged step and absent outside them. ``log``:
    mean and std of log values, returned as geometric mean and the factor exp(std)."""
    series = [s for s in series if s]
    grid = np.array(sorted({step for s in series for step, _ in s}), dtype=float)
    rows = np.full((len(series), len(grid)), np.nan)
    for i, s in enumerate(series):
        steps, values = (np.array(c, dtype=float) for c in zip(*s, strict=True))
        values = np.log(values) if log else values
        inside = (grid >= steps[0]) & (grid <= steps[-1])
        rows[i, inside] = np.interp(grid[inside], steps, values)
    n = (~np.isnan(rows)).sum(axis=0)
    with warnings.catch_warnings():  # a step with one run has no std: 0 there
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(rows, axis=0)
        std = np.where(n > 1, np.nanstd(rows, axis=0, ddof=1), 0.0)
    return (grid, np.exp(mean), np.exp(std), n) if log else (grid, mean, std, n)


def draw_variant(
    ax, runs, metric: str, color, tau: float | None, log_y: bool, ls="-", lw=1.6
) -> int:
    """Raw points faint, the (smoothed) seed mean with its ± std band, an x where a run
    diverged. Returns how many runs it drew."""
    raw = [r.metrics.get(metric, []) for r in runs]
    raw = [[(s, y) for s, y in pts if y > 0] if log_y else pts for pts in raw]
    if not any(raw):
        return 0
    for pts in raw:
        if pts:
            ax.plot(*zip(*pts, strict=True), ".", color=color, ms=2, alpha=0.2, zorder=1)
    curves = [ema(pts, tau) if tau else pts for pts in raw]
    steps, mean, std, _ = seed_band(curves, log=log_y)
    low, high = (mean / std, mean * std) if log_y else (mean - std, mean + std)
    ax.fill_between(steps, low, high, color=color, alpha=0.25, lw=0, zorder=2)
    marker = "o" if len(steps) <= 30 and not tau else None
    if len(steps) < FEW_POINTS:  # two or three validations are points, not a trend
        ax.plot(steps, mean, color=color, ls="none", marker="o", ms=5, zorder=3)
    else:
        ax.plot(steps, mean, color=color, lw=lw, ls=ls, marker=marker, ms=3, zorder=3)
    for run, pts in zip(runs, curves, strict=True):
        if run.status == "diverged" and pts and "loss" in metric:  # the step it diverged at
            at = run.summary.get("diverged_at_step")
            ax.plot(at if isinstance(at, int) else pts[-1][0], pts[-1][1], "x", color=color,
                    ms=8, mew=2, zorder=4)  # fmt: skip
    return sum(1 for pts in raw if pts)


def curve_label(metric: str, ylabel: str, tau: float | None, log_y: bool) -> str:
    words = metric.replace("/", " ")
    what = words if ylabel in ("loss", metric) else f"{words}: {ylabel}"
    if tau:
        return f"{what}\n(EMA, τ = {tau:g} steps)"
    return f"{what}\n(geometric mean)" if log_y else what


def legend_outside(fig: plt.Figure, colors: dict[str, Any], counts: dict[str, set], extra=()):
    """One figure legend right of the panels: variants with their seed counts, band, marks."""

    def seeds(name: str) -> str:
        n = sorted(counts.get(name, {0}))
        return f"{n[0]} seeds" if len(n) == 1 else f"{n[0]}-{n[-1]} seeds"

    handles = [
        Line2D([], [], color=c, lw=2, label=f"{name} ({seeds(name)})") for name, c in colors.items()
    ]
    handles += [Line2D([], [], color="gray", lw=6, alpha=0.25, label="± 1 std over seeds")]
    handles += list(extra)
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)


class Styles:
    """How each variant is drawn, the same in every figure of a report: its colour from its
    label over the swept keys but depth and lr (xy.variant_colors), its line style from its
    learning rate when the sweep varies lr; the legend gives each mapping once."""

    def __init__(self, variants: list[Variant], fields: list[str]) -> None:
        self.fields = fields
        self.colors = variant_colors([v.params for v in variants], fields)
        lrs = sorted({v.params.get("lr") for v in variants}, key=sort_key) if "lr" in fields else []
        self.lines = {x: LINESTYLES[i % len(LINESTYLES)] for i, x in enumerate(lrs)}

    def of(self, v: Variant) -> tuple[str, Any, Any]:
        """(legend name, colour, line style) of variant ``v``."""
        name = colour_label(v.params, self.fields)
        return name, self.colors[name], self.lines.get(v.params.get("lr"), "-")

    def legend_extra(self) -> list[Line2D]:
        return [
            Line2D([], [], color="black", lw=1.4, ls=ls, label=f"lr={value}")
            for value, ls in self.lines.items()
        ]


# --- figures -------------------------------------------------------------------------------------
def by_depth(variants: list[Variant]) -> dict[Any, list[Variant]]:
    depths: dict[Any, list[Variant]] = {}
    for v in sorted(variants, key=lambda v: depth_of(v.params)):
        depths.setdefault(v.params.get("n_layer"), []).append(v)
    return depths


MAX_LINES = 6  # lines in one panel before a figure facets it


def panels(variants: list[Variant], fields: list[str]) -> list[tuple[str, list[Variant]]]:
    """(title, variants) per panel: a panel per depth, faceted further when it would draw more
    than MAX_LINES lines: by learning rate when the sweep varies it (each panel then one line per
    colour), else in chunks of MAX_LINES."""
    out = []
    for depth, group in by_depth(variants).items():
        title = f"depth {depth}" if depth is not None else ""
        if len(group) <= MAX_LINES:
            out.append((title, group))
            continue
        if "lr" in fields:
            by_lr: dict[Any, list[Variant]] = {}
            for v in group:
                by_lr.setdefault(v.params.get("lr"), []).append(v)
            parts = [
                (f"lr {lr:g}", g) for lr, g in sorted(by_lr.items(), key=lambda kv: sort_key(kv[0]))
            ]
        else:
            n = -(-len(group) // MAX_LINES)
            parts = [(f"part {k + 1} of {n}", group[k * MAX_LINES : (k + 1) * MAX_LINES])
                     for k in range(n)]  # fmt: skip
        out += [(", ".join(t for t in (title, part) if t), g) for part, g in parts]
    return out


def time_constant(variants: list[Variant], metric: str) -> float | None:
    if metric not in SMOOTHED:
        return None
    ends = [
        pts[-1][0] - pts[0][0] for v in variants for r in v.runs if (pts := r.metrics.get(metric))
    ]
    return max(1.0, round(max(ends) / EMA_POINTS)) if ends else None


def plot_curves(variants, fields, out_dir, metrics, name, ylabel, log_y=False) -> str | None:
    """A block of rows per metric, a panel per depth (``panels``: faceted past MAX_LINES lines),
    at most four panels a row; one line (seed mean ± std) per variant."""
    rows = [m for m in metrics if any(m in r.metrics for v in variants for r in v.runs)]
    if not rows:
        return None
    facets = panels(variants, fields)
    ncols = min(len(facets), 4)
    per_metric = -(-len(facets) // ncols)
    styles = Styles(variants, fields)
    size = (4.4 * ncols + 2.5, 3.2 * len(rows) * per_metric)
    fig, axes = plt.subplots(
        len(rows) * per_metric, ncols, figsize=size, squeeze=False, layout="constrained"
    )
    for row in range(len(rows)):  # the empty cells after each metric's last panel
        for k in range(len(facets), per_metric * ncols):
            axes[row * per_metric + k // ncols][k % ncols].set_visible(False)
    counts, diverged = {}, False
    for row, metric in enumerate(rows):
        tau = time_constant(variants, metric)
        for k_panel, (where, group) in enumerate(facets):
            ax = axes[row * per_metric + k_panel // ncols][k_panel % ncols]
            for k, v in enumerate(group):
                series, color, ls = styles.of(v)
                # Each later line is thinner: curves that coincide stay visible underneath.
                lw = max(0.8, 2.8 - 0.4 * k)
                if drawn := draw_variant(ax, v.runs, metric, color, tau, log_y, ls, lw):
                    counts.setdefault(series, set()).add(drawn)
                    diverged |= "loss" in metric and any(r.status == "diverged" for r in v.runs)
            if log_y:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(ScalarFormatter())  # 2.5, not 2.5 x 10^0
                ax.yaxis.set_minor_formatter(ScalarFormatter())
            elif metric.endswith("loss"):  # other metrics keep every logged value in range
                clip_losses(ax, [r for v in group for r in v.runs], metric)
            if "loss" in metric and (ref := reference_loss([r for v in group for r in v.runs])):
                low, high = ax.get_ylim()
                ax.set_ylim(min(low, ref[1] * 0.98), max(high, ref[1] * 1.02))
                ax.axhline(ref[1], color="gray", ls=":", lw=1)
                ax.annotate(f"{ref[0]} {ref[1]:.2f}", (1, ref[1]), xycoords=("axes fraction",
                            "data"), ha="right", va="bottom", fontsize=7, color="gray")  # fmt: skip
            words = metric.replace("/", " ")
            ax.set_title(f"{words}, {where}" if where else words, fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel(curve_label(metric, ylabel, tau, log_y), fontsize=8)
            ax.grid(alpha=0.3)
    extra = styles.legend_extra()
    if diverged:
        extra.append(Line2D([], [], ls="", marker="x", color="gray", mew=2, label="diverged here"))
    legend_outside(fig, styles.colors, counts, extra)
    return xy.save(fig, out_dir, name)


def reference_loss(runs) -> tuple[str, float] | None:
    """(name, value) of the loss a model that learned nothing useful reaches: the unigram loss
    of a text run's train split, or chance (log of the classes) for an image run."""
    for key, name in (("unigram_loss", "unigram loss"), ("chance_loss", "chance")):
        values = [v for r in runs if (v := r.summary.get(key)) is not None]
        if values:
            return name, sum(values) / len(values)
    return None


def clip_losses(ax, runs, metric: str) -> None:
    """Cap the y range near the loss at init, so one diverged run does not flatten the rest."""
    firsts = [r.metrics[metric][0][1] for r in runs if r.metrics.get(metric)]
    lows = [min(y for _, y in r.metrics[metric]) for r in runs if r.metrics.get(metric)]
    if firsts and lows and max(firsts) > min(lows):
        span = max(firsts) - min(lows)
        ax.set_ylim(min(lows) - 0.05 * span, max(firsts) + 0.15 * span)


def write_plots(
    variants: list[Variant], fields: list[str], probes: list[Probe], out_dir: Path, logy=False
) -> list[str]:
    """Every plot whose data exists; returns the file names written into ``out_dir``.
    ``logy``: the loss curves on a log axis."""
    groups = probe_groups(probes)
    makers: list[Callable[[], str | None]] = [
        lambda: plot_curves(
            variants, fields, out_dir, ["train/loss", "val/loss"], "loss_curves.png", "loss", logy
        ),
        lambda: xy.plot_xy(
            variants, fields, "n_layer", ["best_val_loss"], out_dir, "best_val_vs_depth.png"
        ),
        lambda: plot_init_grid(groups, out_dir),
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
            [names.UPDATE],
            "model_update.png",
            "||F(x,θ_t) − F(x,θ_0)||",
            log_y=True,
        ),
        lambda: plot_curves(variants, fields, out_dir, [names.LOG_Z], "log_z.png", "mean log Z"),
        lambda: plot_curves(
            variants,
            fields,
            out_dir,
            ["sharpness/hessian", "sharpness/preconditioned"],
            "sharpness.png",
            "top eigenvalue",
            log_y=True,
        ),
    ]
    return [name for make in makers if (name := make())] + write_heatmaps(variants, out_dir)
