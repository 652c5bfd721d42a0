"""Best learning rate against width and depth: the report's section and lr_transfer.png for a
sweep that varies ``model.n_embd`` or ``model.n_layer`` beside ``optim.lr`` (analysis/lr_sweep.py
gives each variant's curve and best lr). A rate that transfers (muP across width, Yang et al.
2022; CompleteP across depth, Dey et al. 2025) stays flat as the model grows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.variants import label, md_cell, sort_key

SIZE_AXES = {"n_embd": "width", "n_layer": "depth"}


def best_lrs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each size field the sweep varies (n_embd, n_layer), each group of the other fields
    (e.g. one per ``param``) with its best lr at every size: a learning rate that transfers
    stays flat as the size grows (Yang et al. 2022, Fig. 1; Dey et al. 2025). Entries whose best
    lr is at the grid's edge are kept and flagged: their true best may lie outside."""
    drawn = [e for e in entries if e["lrs"] and not e.get("did_not_train")]
    out = []
    for field, axis in SIZE_AXES.items():
        sizes = {e["variant"].get(field) for e in drawn}
        if len(sizes - {None}) < 2:
            continue
        others = [f for f in (drawn[0]["variant"] if drawn else {}) if f != field]
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for e in drawn:
            groups.setdefault(tuple(e["variant"].get(f) for f in others), []).append(e)
        for key, members in sorted(groups.items(), key=lambda kv: [sort_key(x) for x in kv[0]]):
            points = sorted(
                ((e["variant"][field], e["best_lr"], e["edge"]) for e in members),
                key=lambda p: sort_key(p[0]),
            )
            if len(points) < 2:  # one size: nothing to say about transfer
                continue
            name = label(dict(zip(others, key, strict=True)), others)
            out.append({"field": field, "axis": axis, "label": name, "points": points})
    return out


def markdown(entries: list[dict[str, Any]]) -> list[str]:
    """The report's section: per group, the best lr at each width or depth (* at the edge)."""
    rows = best_lrs(entries)
    if not rows:
        return []
    out = ["## Best learning rate against width and depth", ""]
    out.append(
        "Each group's best lr (lowest mean final val loss) at every size the sweep ran; "
        "a rate that transfers stays put as the model widens or deepens. `*`: the best lr is "
        "at the grid's edge, so the true best may lie outside it. [lr_transfer.png]"
        "(lr_transfer.png) draws it."
    )
    for axis in dict.fromkeys(r["axis"] for r in rows):
        group = [r for r in rows if r["axis"] == axis]
        sizes = sorted({p[0] for r in group for p in r["points"]}, key=sort_key)
        out += ["", f"| variant | {' | '.join(f'{axis} {s}' for s in sizes)} |"]
        out.append("|---" * (len(sizes) + 1) + "|")
        for r in group:
            at = {size: f"{lr:g}{'*' if edge else ''}" for size, lr, edge in r["points"]}
            out.append(f"| {md_cell(r['label'])} | {' | '.join(at.get(s, '–') for s in sizes)} |")
    return [*out, ""]


def plot(entries: list[dict[str, Any]], out_dir: Path) -> str | None:
    """lr_transfer.png: best lr against the size (log-log), a panel per axis, a line per group;
    a hollow marker where the best lr is at the grid's edge."""
    from analysis.xy import plt, save

    rows = best_lrs(entries)
    if not rows:
        return None
    axes_names = list(dict.fromkeys(r["axis"] for r in rows))
    fig, axes = plt.subplots(1, len(axes_names), figsize=(5.5 * len(axes_names), 4), squeeze=False)
    for ax, axis in zip(axes[0], axes_names, strict=True):
        group = [r for r in rows if r["axis"] == axis]
        lrs = sorted({e_lr for e in entries for e_lr in e["lrs"]})
        for k, r in enumerate(group):
            xs, ys = [p[0] for p in r["points"]], [p[1] for p in r["points"]]
            line = ax.plot(xs, ys, marker="o", lw=1.6, label=r["label"], color=f"C{k % 10}")[0]
            for x, y, edge in r["points"]:
                if edge:
                    ax.plot([x], [y], "o", ms=10, mfc="none", mec=line.get_color(), mew=1.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted({p[0] for r in group for p in r["points"]})
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_yticks(lrs, [f"{x:g}" for x in lrs])
        ax.minorticks_off()
        ax.set_xlabel(f"{axis} ({group[0]['field']})")
        ax.set_ylabel("best learning rate (circled: at the grid's edge)")
        ax.set_title(f"best lr vs {axis}: flat = the rate transfers", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    return save(fig, out_dir, "lr_transfer.png")
