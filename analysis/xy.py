"""Any swept key against any run result: ``python scripts/compare.py SWEEP --x optim.lr --y
best_val_loss`` (several y: ``--y max:attn/max_logit,final_val_loss``, one panel each).

x is a config key the sweep varies (``optim.lr`` or its short name ``lr``, ``model.n_layer``,
``data.batch_size``, ...). y is a summary.json field (best_val_loss, final_val_loss,
best_val_acc, tokens_per_s, ...) or ``<min|max|first|last|mean>:<metric>`` reduced over a
logged metric. One line per remaining variant (the other swept keys): the mean over its
completed seeds with a ± one sample std band, each seed a faint dot. Diverged runs have no
result to plot: they are counted as x marks in a band above the data. The x axis is logarithmic
for a learning rate and for positive values spanning 8x or more (base 2 for integers).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from analysis.runs import CANONICAL, Run, finite  # noqa: E402
from analysis.variants import Variant, label, sort_key  # noqa: E402

REDUCE = {
    "min": min,
    "max": max,
    "first": lambda v: v[0],
    "last": lambda v: v[-1],
    "mean": statistics.fmean,
}


# Keys a report draws as panels, x axes or line styles, never as colours: the colour of a
# variant is its label over the other swept keys, the same in every figure of a report.
AXIS_KEYS = ("n_layer", "lr")


def colour_label(params: dict[str, Any], fields: list[str]) -> str:
    """The name a variant's colour is keyed on: its label over the fields but depth and lr."""
    return label(params, [f for f in fields if f not in AXIS_KEYS])


def variant_colors(params: list[dict[str, Any]], fields: list[str]) -> dict[str, Any]:
    """Colour label -> colour over every variant of a report: each figure that calls it with
    the report's variants gives one variant one colour."""
    return series_colors([colour_label(p, fields) for p in params])


def series_colors(labels: list[str]) -> dict[str, Any]:
    """One color per series name; tab20 past ten series, so no two share a color."""
    names = sorted(set(labels))
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def save(fig: plt.Figure, out_dir: Path, name: str) -> str:
    """Write ``fig`` as out_dir/name, legends outside the axes included; return the name."""
    fig.savefig(out_dir / name, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return name


def resolve_key(key: str, variants: list[Variant]) -> str:
    """The variant param a key names (``optim.lr`` is the column ``lr``); one line if unswept."""
    short = next((k for k, keys in CANONICAL.items() if key in keys), key)
    swept = sorted(
        {k for v in variants for k in v.params if len({str(w.params.get(k)) for w in variants}) > 1}
    )
    if short not in swept:
        raise ValueError(f"--x {key} is not swept in this sweep; choose one of: {', '.join(swept)}")
    return short


def run_value(run: Run, y: str) -> float | None:
    """A summary result, or ``how:metric`` reduced over the run's logged metric."""
    how, sep, metric = y.partition(":")
    if not sep:
        return run.result(y)
    if how not in REDUCE:
        raise ValueError(f"--y {y}: unknown reduction {how!r}; choose one of {', '.join(REDUCE)}")
    values = [v for _, v in run.metrics.get(metric, [])]
    return finite(REDUCE[how](values)) if values else None


def x_scale(key: str, xs: list[Any]) -> str | None:
    """'log2', 'log10', 'linear', or None for a categorical axis."""
    if not all(finite(x) is not None for x in xs):
        return None
    positive = all(x > 0 for x in xs)
    if positive and all(float(x).is_integer() for x in xs) and max(xs) / min(xs) >= 8:
        return "log2"
    if positive and (re.search(r"(^|[._])(lr|learning_rate)$", key) or max(xs) / min(xs) >= 8):
        return "log10"
    return "linear"


def series_of(variants: list[Variant], fields: list[str], x: str) -> dict[str, list[Variant]]:
    """Variants by their label over the fields other than x, each list sorted by x."""
    out: dict[str, list[Variant]] = {}
    for v in variants:
        if v.params.get(x) is not None:
            out.setdefault(label(v.params, [f for f in fields if f != x]), []).append(v)
    return {k: sorted(vs, key=lambda v: sort_key(v.params[x])) for k, vs in sorted(out.items())}


def y_label(y: str) -> str:
    how, sep, metric = y.partition(":")
    return f"{how} over steps of {metric}" if sep else y


LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))


def draw_panel(
    ax, series: dict[str, list[Variant]], x: str, y: str, colors, position, styles=None
) -> list:
    """Seed dots, mean line and ± std band per series; returns the diverged marks to place.
    Values spanning 100x or more get a log axis (a band's lower edge then stays above 0)."""
    diverged, drawn = [], []
    for k, (name, members) in enumerate(series.items()):
        xs, means, stds = [], [], []
        for v in members:
            pos = position(v.params[x])
            values = [
                val
                for r in v.runs
                if r.status == "completed" and (val := run_value(r, y)) is not None
            ]
            if values:
                drawn += values
                ax.plot([pos] * len(values), values, ".", color=colors[name], alpha=0.35, ms=5)
                xs.append(pos)
                means.append(statistics.fmean(values))
                stds.append(statistics.stdev(values) if len(values) > 1 else 0.0)
            if n_div := sum(r.status == "diverged" for r in v.runs):
                diverged.append((pos, k, name, n_div))
        if xs:
            low = [max(m - s, m / 10) for m, s in zip(means, stds, strict=True)]
            high = [m + s for m, s in zip(means, stds, strict=True)]
            ax.fill_between(xs, low, high, color=colors[name], alpha=0.2, lw=0)
            ls = (styles or {}).get(name, "-")
            ax.plot(xs, means, marker="o", ls=ls, color=colors[name], lw=1.6, ms=4)
    if drawn and min(drawn) > 0 and max(drawn) / min(drawn) >= 100:
        ax.set_yscale("log")
    return diverged


def mark_diverged(ax, diverged: list, colors, n_series: int, scale: str | None) -> None:
    """A band above the data holds one x per variant with diverged runs, and their count."""
    low, high = ax.get_ylim()
    log = ax.get_yscale() == "log"
    ax.set_ylim(low, high * (high / low) ** 0.2 if log else high + 0.2 * (high - low))
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for pos, k, name, n_div in diverged:
        shift = 0.03 * (k - (n_series - 1) / 2)  # spread the series apart
        pos = pos * (1 + shift) if scale and scale.startswith("log") else pos + shift
        ax.plot(pos, 0.95, "x", transform=top, color=colors[name], ms=9, mew=2)
        ax.text(pos, 0.87, str(n_div), transform=top, color=colors[name], ha="center", fontsize=7)
    ax.axhline(high, color="gray", lw=0.5, ls=":")


def plot_xy(
    variants: list[Variant],
    fields: list[str],
    x: str,
    ys: list[str],
    out_dir: Path,
    name: str | None = None,
) -> str | None:
    """``ys`` against swept key ``x``, one panel per y; None when x takes fewer than 2 values
    or no run has a y."""
    values = sorted({v.params.get(x) for v in variants} - {None}, key=sort_key)
    if len(values) < 2:
        return None
    series = series_of(variants, fields, x)
    if not any(
        run_value(r, y) is not None
        for vs in series.values()
        for v in vs
        for r in v.runs
        for y in ys
    ):
        return None
    scale = x_scale(x, values)
    position = (lambda value: value) if scale else (lambda value: values.index(value))
    palette = variant_colors([v.params for v in variants], fields)
    colors = {n: palette[colour_label(vs[0].params, fields)] for n, vs in series.items()}
    lrs = sorted({vs[0].params.get("lr") for vs in series.values()}, key=sort_key)
    styles = {
        n: LINESTYLES[lrs.index(vs[0].params.get("lr")) % len(LINESTYLES)]
        if x != "lr" and "lr" in fields else "-"
        for n, vs in series.items()
    }  # fmt: skip
    size = (5.2 * len(ys) + 2.2, 3.8)
    fig, axes = plt.subplots(1, len(ys), figsize=size, squeeze=False, layout="constrained")
    any_diverged = False
    for ax, y in zip(axes[0], ys, strict=True):
        diverged = draw_panel(ax, series, x, y, colors, position, styles)
        if diverged:
            mark_diverged(ax, diverged, colors, len(series), scale)
            any_diverged = True
        format_x(ax, x, values, scale, position)
        ax.set_ylabel(f"{y_label(y)}\n(mean ± std over completed seeds)", fontsize=8)
        ax.set_title(f"{y_label(y)} vs {x}", fontsize=10)
        ax.grid(alpha=0.3)
    handles = [
        plt.Line2D(
            [], [], color=c, ls=styles[n], marker="o", label=f"{n} ({seed_count(series[n])} seeds)"
        )
        for n, c in colors.items()
    ]
    handles += [plt.Line2D([], [], color="gray", lw=6, alpha=0.2, label="± 1 std over seeds")]
    handles += [plt.Line2D([], [], ls="", marker=".", color="gray", label="one seed")]
    if any_diverged:
        handles += [
            plt.Line2D([], [], ls="", marker="x", mew=2, color="gray", label="diverged (count)")
        ]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    name = name or re.sub(r"[^\w.-]+", "_", f"{'_'.join(ys)}_vs_{x}") + ".png"
    return save(fig, out_dir, name)


def seed_count(members: list[Variant]) -> str:
    n = sorted({sum(r.status == "completed" for r in v.runs) for v in members})
    return str(n[0]) if len(n) == 1 else f"{n[0]}-{n[-1]}"


def format_x(ax, x: str, values: list, scale: str | None, position) -> None:
    if scale in ("log2", "log10"):
        ax.set_xscale("log", base=2 if scale == "log2" else 10)
        ax.minorticks_off()
    ax.set_xticks([position(v) for v in values], [f"{v:g}" if scale else str(v) for v in values])
    name = {"n_layer": "depth (n_layer)", "lr": "learning rate (optim.lr)"}.get(x, x)
    ax.set_xlabel(name + (" (log scale)" if scale in ("log2", "log10") else ""))
