"""The figures of the init probes (F1, Xiong et al. 2020): per-layer gradient and residual norms
at initialization against the layer, the last FFN's gradient against depth, and F1's 2x2 grid.
Each maker returns its file name, or None when its data does not exist."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from analysis import xy  # noqa: E402
from analysis.init_probes import depth_of  # noqa: E402
from analysis.xy import series_colors  # noqa: E402
from runs.numbers import log_slope  # noqa: E402

MAX_COLS = 4  # panels per row of a per-layer figure


def plot_per_layer(
    groups, key: str, ylabel: str, out_dir: Path, name: str, with_fc2: bool
) -> str | None:
    """One panel per series, one line (seed mean ± std) per depth over layer index; maybe the
    last-FFN grad vs depth. The per-layer panels share one log y axis, so a flat profile looks
    flat next to a growing one."""
    fc2 = [g for g in groups if g["last_fc2"] is not None] if with_fc2 else []
    groups = [g for g in groups if g[key]]
    if not groups and not fc2:
        return None
    series = sorted({g["series"] for g in groups})
    n_panels = len(series) + (1 if fc2 else 0)
    n_cols = min(n_panels, MAX_COLS)  # wrap into rows: never a strip thousands of pixels wide
    n_rows = math.ceil(n_panels / n_cols)
    size = (4.4 * n_cols + 1.5, 3.4 * n_rows)
    fig, grid = plt.subplots(n_rows, n_cols, figsize=size, squeeze=False, layout="constrained")
    for ax in grid.flat[n_panels:]:
        ax.set_visible(False)
    panels = list(grid.flat[:n_panels])
    depths = sorted({depth_of(g["params"]) for g in groups})
    cmap = plt.get_cmap("viridis")
    shade = {d: cmap(0.9 * i / max(len(depths) - 1, 1)) for i, d in enumerate(depths)}
    for i, (ax, name_) in enumerate(zip(panels, series, strict=False)):
        if i:
            ax.sharey(panels[0])
        for g in (g for g in groups if g["series"] == name_):
            color, mean = shade[depth_of(g["params"])], np.array(g[key])
            std = np.array(g.get(f"{key}_std") or [0.0] * len(mean))[: len(mean)]
            layers = np.arange(len(mean))
            low = np.clip(mean - std, mean * 1e-3, None)  # a log axis: the band stays above 0
            ax.fill_between(layers, low, mean + std, color=color, alpha=0.25, lw=0)
            ax.plot(layers, mean, "o-", ms=3, color=color)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name_} ({groups[0]['source']})", fontsize=9)
        ax.set_xlabel("layer")
        ax.set_ylabel(f"{ylabel}\nmean over seeds", fontsize=8)
        ax.grid(alpha=0.3)
    if series:
        widen_log_range(panels[0])
    handles = [Line2D([], [], color=shade[d], lw=2, label=f"L={d:g}") for d in depths]
    handles += [Line2D([], [], color="gray", lw=6, alpha=0.25, label="± 1 std over seeds")]
    if fc2:
        handles += plot_fc2(panels[-1], fc2)
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    return xy.save(fig, out_dir, name)


def plot_fc2(ax, fc2: list[dict]) -> list[Line2D]:
    """The last layer's FFN (fc2) grad norm at init against depth, one line per series with
    its fitted log-log slope (Xiong et al. 2020: 0 for Post-LN, -1/2 for Pre-LN), and a dashed
    1/sqrt(L) reference through Pre-LN's first point (else the first series'); returns the
    legend handles."""
    colors = series_colors([g["series"] for g in fc2])
    handles, anchor = [], None
    for name_ in sorted(colors, key=lambda n: not n.endswith("=pre")):
        pts = sorted((depth_of(g["params"]), g["last_fc2"]) for g in fc2 if g["series"] == name_)
        xs, ys = zip(*pts, strict=True)
        fit = f", slope {log_slope(xs, ys):+.2f}" if len(pts) > 1 and min(ys) > 0 else ""
        handles += ax.plot(xs, ys, "o-", color=colors[name_], label=f"fc2: {name_}{fit}")
        anchor = anchor or pts[0]
    depths = sorted({depth_of(g["params"]) for g in fc2})
    if anchor[1] > 0 and len(depths) > 1:
        ref = [anchor[1] * (anchor[0] / d) ** 0.5 for d in depths]
        handles += ax.plot(depths, ref, "--", color="gray", lw=1, label="1/sqrt(L) reference")
    ax.set_xscale("log", base=2)
    ticks = sorted({depth_of(g["params"]) for g in fc2})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yscale("log")
    widen_log_range(ax)
    ax.set_title("last layer FFN (fc2) grad norm at init", fontsize=9)
    ax.set_xlabel("depth (n_layer)")
    ax.grid(alpha=0.3)
    return handles


def plot_init_grid(groups, out_dir: Path, name: str = "init_grid.png") -> str | None:
    """F1 in one 2x2 figure, one panel per claim of Xiong et al. 2020: the last FFN's gradient
    against depth (with its fitted slopes and a 1/sqrt(L) reference), every layer's gradient and
    residual norm at the deepest depth, and the residual norm's last/first-layer ratio against
    depth; one colour per placement throughout."""
    fc2 = [g for g in groups if g["last_fc2"] is not None]
    layered = [g for g in groups if g["grad_norm"] and g["act_norm"]]
    if not fc2 or not layered or len({depth_of(g["params"]) for g in groups}) < 2:
        return None  # three of its panels are against depth: a one-depth sweep has none
    colors = series_colors([g["series"] for g in groups])
    deepest = max(depth_of(g["params"]) for g in layered)
    fig, axes = plt.subplots(2, 2, figsize=(10.5, 7.5), layout="constrained")
    handles = plot_fc2(axes[0][0], fc2)
    for ax, key, what in (
        (axes[0][1], "grad_norm", "grad norm"),
        (axes[1][0], "act_norm", "residual norm"),
    ):
        for g in sorted(layered, key=lambda g: g["series"]):
            if depth_of(g["params"]) == deepest:
                ax.plot(g[key], "o-", ms=2.5, color=colors[g["series"]])
        ax.set_yscale("log")
        widen_log_range(ax)
        ax.set_title(f"{what} per layer at init, L={deepest:g}", fontsize=9)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    ax = axes[1][1]
    for series in sorted(colors):
        pts = sorted(
            (depth_of(g["params"]), g["act_norm"][-1] / g["act_norm"][0])
            for g in layered
            if g["series"] == series and g["act_norm"][0] > 0
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color=colors[series])
    ax.axhline(1.0, color="gray", lw=1, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({depth_of(g["params"]) for g in layered}))
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:g}")
    ax.minorticks_off()
    ax.set_title("residual norm, last layer / first layer, vs depth", fontsize=9)
    ax.set_xlabel("depth (n_layer)")
    ax.grid(alpha=0.3)
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    return xy.save(fig, out_dir, name)


def widen_log_range(ax, factor: float = 4.0) -> None:
    """A log axis spans at least ``factor``: float noise on a flat line must not fill the panel."""
    low, high = ax.get_ylim()
    if low > 0 and high / low < factor:
        mid = math.sqrt(low * high)
        ax.set_ylim(mid / math.sqrt(factor), mid * math.sqrt(factor))
