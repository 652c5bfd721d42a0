"""Per-layer probes as layer x step heat maps: one figure per probe, one panel per variant.

A panel's cell (layer i, step s) is the mean over the variant's runs of ``<probe>/layer_{i}`` at
step s (runs that logged it there; a diverged run stops adding where its log ends). All panels of
a figure share one color scale, so variants compare by color; quantities that span orders of
magnitude (norms, maxima, update ratios) use a log scale, bounded ones (cosine, entropy) a linear
one.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm, Normalize  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from analysis import xy  # noqa: E402
from analysis.cards import CROSSINGS, first_crossing  # noqa: E402
from analysis.runs import Run  # noqa: E402
from analysis.variants import Variant  # noqa: E402
from runs import metric_names as names  # noqa: E402

# metric prefix -> (file name, log color scale)
HEATMAPS: dict[str, tuple[str, bool]] = {
    names.ACT_NORM: ("heat_act_norm.png", True),
    names.ACT_MAX: ("heat_act_max.png", True),
    names.MAX_LOGIT: ("heat_max_logit.png", True),
    names.BLOCK_COS: ("heat_block_cos.png", False),
    names.ATTN_ENTROPY: ("heat_attn_entropy.png", False),
    names.ATTN_ENTROPY_MIN: ("heat_attn_entropy_min.png", False),
    "update_ratio": ("heat_update_ratio.png", True),
    # the instruments (when a run turned them on)
    names.ATTN_SINK: ("heat_attn_sink.png", False),
    names.ATTN_FIRST: ("heat_attn_first_token.png", False),
    names.ACT_MASSIVE: ("heat_act_massive.png", True),
    names.ACT_KURTOSIS: ("heat_act_kurtosis.png", True),
    f"{names.LINEAR_OUT}/fc2": ("heat_linear_out_fc2.png", True),
    f"{names.SPECTRAL}/fc2": ("heat_spectral_fc2.png", True),
    names.ADAM_UPDATE: ("heat_adam_update.png", True),
    names.LAYER_DROP: ("heat_layer_drop.png", False),
}
MAX_COLUMNS = 4


def layer_grid(runs: list[Run], prefix: str) -> tuple[list[int], np.ndarray] | None:
    """(steps, matrix of shape (layers, steps)): the runs' mean per cell, NaN where none logged."""
    pattern = re.compile(re.escape(prefix) + r"/layer_(\d+)")
    cells: dict[tuple[int, int], list[float]] = {}
    for run in runs:
        for name, series in run.metrics.items():
            if m := pattern.fullmatch(name):
                for step, value in series:
                    cells.setdefault((int(m.group(1)), step), []).append(value)
    if not cells:
        return None
    steps = sorted({s for _, s in cells})
    n_layers = max(i for i, _ in cells) + 1
    matrix = np.full((n_layers, len(steps)), np.nan)
    where = {s: j for j, s in enumerate(steps)}
    for (i, step), found in cells.items():
        matrix[i, where[step]] = float(np.mean(found))
    return steps, matrix


def edges(points: list[int], clamp: bool = False) -> np.ndarray:
    """Cell edges around each point (midpoints between neighbours); ``clamp``: the outer edges
    at the first and last point, so a step axis starts at the first logged step."""
    x = np.asarray(points, dtype=float)
    if len(x) == 1:
        return np.array([x[0] - 0.5, x[0] + 0.5])
    mid = (x[1:] + x[:-1]) / 2
    if clamp:
        return np.concatenate([[x[0]], mid, [x[-1]]])
    return np.concatenate([[2 * x[0] - mid[0]], mid, [2 * x[-1] - mid[-1]]])


def color_scale(grids: list[np.ndarray], log: bool) -> Normalize:
    values = np.concatenate([g[np.isfinite(g)] for g in grids])
    if log and (values > 0).any():
        positive = values[values > 0]
        low, high = float(positive.min()), float(positive.max())
        return LogNorm(low, high if high > low else low * 10)
    low, high = float(values.min()), float(values.max())
    return Normalize(low, high if high > low else low + 1)


def plot_heatmap(variants: list[Variant], prefix: str, out_dir: Path) -> str | None:
    """One panel per variant with data for ``prefix``; None when no run logged it."""
    name, log = HEATMAPS[prefix]
    found = [(v, g) for v in variants if (g := layer_grid(v.runs, prefix))]
    if not found:
        return None
    cols = min(MAX_COLUMNS, len(found))
    rows = math.ceil(len(found) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.6 * cols + 1.2, 3.0 * rows), squeeze=False, layout="constrained"
    )
    norm = color_scale([g for _, (_, g) in found], log)
    mesh = None
    for ax, (variant, (steps, grid)) in zip(axes.flat, found, strict=False):
        layers = list(range(grid.shape[0]))
        mesh = ax.pcolormesh(edges(steps, True), edges(layers), grid, norm=norm, cmap="viridis")
        ax.set_title("\n".join(textwrap.wrap(variant.label, 44)), fontsize=7)  # long labels wrap
        ax.set_xlabel("step")
        ax.set_ylabel("layer")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole
        mark_events(ax, variant.runs, prefix)
    for ax in list(axes.flat)[len(found) :]:
        ax.set_visible(False)
    fig.colorbar(mesh, ax=axes, label=f"{prefix}/layer_i (mean over seeds)")
    return xy.save(fig, out_dir, name)


def mark_events(ax, runs: list[Run], prefix: str) -> None:
    """Each run's story on a panel, at the step it happened: a red dashed line where a run
    diverged, a white triangle at the layer and step where this probe first crossed its
    threshold (analysis/cards.py: CROSSINGS)."""
    for run in runs:
        at = run.summary.get("diverged_at_step")
        if run.status == "diverged" and isinstance(at, int):
            ax.axvline(at, color="red", ls="--", lw=1.2)
        for crossing in CROSSINGS:
            if crossing.pattern == names.per_layer(prefix, "*"):
                found = first_crossing(run, crossing)
                if found and found[2] is not None:
                    ax.plot(found[0], found[2], "v", color="white", mec="black", ms=7)


def write_heatmaps(variants: list[Variant], out_dir: Path) -> list[str]:
    """A heat map for every per-layer probe some run logged; the file names written."""
    return [name for prefix in HEATMAPS if (name := plot_heatmap(variants, prefix, out_dir))]
