"""A sweep with ``optim.lr`` in its grid: each variant's final loss against the learning rate.

Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training
instabilities") compare architectures by the final loss over a range of learning rates, each at
its best, and summarize how much a variant cares about the rate by its LR sensitivity:

    LR sensitivity = E over the swept lrs of [ min(l(lr), l0) - l* ]

l(lr) is the final validation loss at that rate, the mean over seeds of each run's loss capped
at l0 (a diverged run counts at l0), l0 the loss at initialization (the mean first logged train
loss of the variant's runs), l* = min over the lrs of l(lr). ``capped`` and ``sensitivity`` are
the one definition: the report's column and the findings' verdicts (analysis/findings/estimands.py)
both compute with them. A variant whose best rate is the smallest or the largest swept
(``edge``) may do better outside the grid: widen it before ranking on it. A variant whose runs
at its best rate all completed without training (runs/record.did_not_train: they ended on
the unigram or chance plateau) never trained at any rate: its curve is flat because nothing was
learned, so it is marked "did not train" and ranked after every variant that trained, never as
the least sensitive.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analysis import stats
from analysis.runs import Run, finite
from analysis.variants import Variant, grid_seeds, label, md_cell, sort_key

METRIC = "final_val_loss"


def is_lr_sweep(variants: list[Variant], fields: list[str]) -> bool:
    return "lr" in fields and len({v.params.get("lr") for v in variants}) > 1


def init_loss(runs: list[Run]) -> float | None:
    """l0: the mean of the runs' first logged train losses (the loss at initialization)."""
    firsts = [series[0][1] for r in runs if (series := r.metrics.get("train/loss"))]
    return statistics.fmean(firsts) if firsts else None


def capped(loss: float | None, l0: float | None) -> float | None:
    """A run's loss as the LR sensitivity counts it: its final val loss, at most l0; l0 when it
    has none (it diverged, or its loss is not finite)."""
    if loss is None:
        return l0
    return loss if l0 is None else min(loss, l0)


def sensitivity(curve: Mapping[Any, float]) -> float:
    """E over the swept lrs of l(lr) - l*, ``curve``: lr -> l(lr) (capped losses' mean)."""
    best = min(curve.values())
    return statistics.fmean(x - best for x in curve.values())


def run_loss(run: Run, l0: float | None) -> float | None:
    """A completed or diverged run's capped loss; None for a failed or unfinished run, and for a
    completed one without a validation loss (no result either way; never counted diverged)."""
    if run.status == "diverged":
        return capped(None, l0)
    if run.status != "completed" or (loss := finite(run.result(METRIC))) is None:
        return None
    return capped(loss, l0)


def point(runs: list[Run], l0: float | None, lr: Any) -> dict[str, Any] | None:
    """The curve at one lr: the mean (and sd) of its runs' capped losses."""
    scored = [(r, x) for r in runs if (x := run_loss(r, l0)) is not None]
    if not scored:
        return None
    losses = [x for _, x in scored]
    return {
        "lr": lr,
        "loss": statistics.fmean(losses),
        "std": statistics.stdev(losses) if len(losses) > 1 else None,
        "n": len(losses),
        "diverged": sum(r.status == "diverged" for r in runs),
        "did_not_train": sum(r.did_not_train is not None for r in runs),
        "by_seed": {str(r.seed): x for r, x in scored},  # each run's capped loss
    }


def lr_curve(members: list[Variant]) -> dict[str, Any]:
    """One variant's curve over the lrs of ``members`` (the same variant at each lr), drawn
    from the grid's seeds: those run at more than one rate. Seeds run at one rate only are
    confirming seeds there (reproduce.confirm: fresh seeds at the best rate the grid chose):
    they enter ``confirm``, never the choice of the rate."""
    runs = [r for v in members for r in v.runs]
    l0 = init_loss(runs)
    grid = grid_seeds([[r.seed for r in v.runs] for v in members])
    points = []
    for v in sorted(members, key=lambda v: sort_key(v.params["lr"])):
        found = point([r for r in v.runs if str(r.seed) in grid], l0, v.params["lr"])
        points += [found] if found else []
    if not points:
        return {"lrs": [], "points": [], "l0": l0}
    best = min(points, key=lambda p: p["loss"])
    lrs = [p["lr"] for p in points]
    at_best = next(v for v in members if v.params["lr"] == best["lr"])
    fresh = point([r for r in at_best.runs if str(r.seed) not in grid], l0, best["lr"])
    return {
        **({"confirm": fresh} if fresh else {}),
        "lrs": lrs,
        "points": points,
        "l0": l0,
        "best_lr": best["lr"],
        "best_val_loss": best["loss"],
        "lr_sensitivity": sensitivity({p["lr"]: p["loss"] for p in points}),
        **stability_edge(points, best["lr"]),
        "edge": len(lrs) > 1 and best["lr"] in (lrs[0], lrs[-1]),
        "did_not_train": best["did_not_train"] + best["diverged"] >= best["n"],
        "untrained": untrained(best),
    }


def untrained(p: dict[str, Any]) -> str | None:
    """How the runs at a rate failed when none trained: ``diverged``, ``stalled`` (ended on the
    plateau), or both counted; None when some run trained."""
    if p["diverged"] + p["did_not_train"] < p["n"]:
        return None
    if p["diverged"] == p["n"]:
        return "diverged"
    if p["did_not_train"] == p["n"]:
        return "stalled"
    return f"did not train ({p['diverged']} diverged, {p['did_not_train']} stalled)"


def trained_everywhere(p: dict[str, Any]) -> bool:
    """Every run at this rate trained: none diverged, none ended on the plateau."""
    return not p["diverged"] and not p["did_not_train"]


def stability_edge(points: list[dict[str, Any]], best_lr: Any) -> dict[str, Any]:
    """From the best rate upward: the largest rate at which every run trained
    (``trains_up_to``) and the next, where some run diverged or stalled (``unstable_at``;
    None when the grid never got there: its top rate still trains)."""
    above = [p for p in points if sort_key(p["lr"]) >= sort_key(best_lr)]
    up_to, unstable = None, None
    for p in above:
        if not trained_everywhere(p):
            unstable = p["lr"]
            break
        up_to = p["lr"]
    return {"trains_up_to": up_to, "unstable_at": unstable}


def per_seed_sensitivity(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """LR sensitivity per seed (each seed's own curve over the rates it ran all of), its mean
    and 95% t interval over those seeds; None with fewer than 2 such seeds or 2 rates."""
    if not points or any("by_seed" not in p for p in points):
        return None
    seeds = set.intersection(*(set(p["by_seed"]) for p in points))
    if len(seeds) < 2 or len(points) < 2:
        return None
    values = [sensitivity({p["lr"]: p["by_seed"][s] for p in points}) for s in sorted(seeds)]
    ci = stats.mean_interval(values)
    # a sensitivity is never negative (every rate's loss is at least the best): so is its bound
    return {"mean": ci.effect, "lo": max(0.0, ci.lo), "hi": ci.hi, "n": len(values)}


def widen_advice(entries: list[dict[str, Any]]) -> list[str]:
    """What the grid did not reach: no variant unstable at any rate (widen upward), or a
    variant whose best rate is the grid's smallest (widen downward)."""
    drawn = [e for e in entries if e["lrs"]]
    if not drawn:
        return []
    out = []
    top = max((x for e in drawn for x in e["lrs"]), key=sort_key)
    if all(e.get("unstable_at") is None and not e.get("did_not_train") for e in drawn):
        up = ",".join(f"{float(top) * f:g}" for f in (3, 10))
        out.append(
            f"No variant diverged or stalled at any rate up to {float(top):g}: the grid never "
            f"reached instability, so it cannot tell the variants' stability apart; widen it "
            f"upward (e.g. optim.lr={up})."
        )
    low = [e["label"] for e in drawn if e["edge"] and e.get("best_lr") == e["lrs"][0]]
    if low:
        bottom = float(min((x for e in drawn for x in e["lrs"]), key=sort_key))
        out.append(
            f"Best at the grid's smallest rate: {', '.join(low)}; widen it downward (e.g. "
            f"optim.lr={bottom / 3:g},{bottom / 10:g})."
        )
    return out


def ranked(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with a curve, best loss first; variants that did not train after the rest."""
    drawn = [e for e in entries if e["lrs"]]
    return sorted(drawn, key=lambda e: (bool(e.get("did_not_train")), best_point(e)[0]))


def assign_ranks(entries: list[dict[str, Any]]) -> None:
    """Each entry's ``rank`` from tests: 1 + the number of variants significantly better at
    their best lr (pairwise Welch tests over the seeds there, Holm-adjusted:
    analysis/stats.rank_by_tests); variants that did not train, or have no curve, get none."""
    trained = [e for e in ranked(entries) if not e.get("did_not_train")]
    ranks = stats.rank_by_tests({id(e): best_point(e) for e in trained})
    for e in entries:
        e["rank"] = ranks.get(id(e))


def best_point(entry: dict[str, Any]) -> tuple[float, float | None, int]:
    """(mean, sd, seeds) of the variant's loss at its best lr: its confirming seeds' when it
    has them (the rank and interval then come from seeds the choice never saw)."""
    p = entry.get("confirm") or next(p for p in entry["points"] if p["lr"] == entry["best_lr"])
    return p["loss"], p["std"], p["n"]


def rank_text(entry: dict[str, Any]) -> str:
    return "–" if entry.get("rank") is None else str(entry["rank"])


def sensitivity_text(entry: dict[str, Any]) -> str:
    if entry.get("did_not_train"):
        return entry.get("untrained") or "did not train"
    value, per_seed = entry.get("lr_sensitivity"), entry.get("lr_sensitivity_per_seed")
    if value is None:
        return "–"
    if not per_seed:
        return f"{value:.4f}"
    return f"{value:.4f} ({per_seed['mean']:.4f} [{per_seed['lo']:.4f}, {per_seed['hi']:.4f}])"


def lr_sweep(variants: list[Variant], fields: list[str]) -> list[dict[str, Any]]:
    """report.json's ``lr_sweep``: per variant (its other keys), the curve and its summary."""
    if not is_lr_sweep(variants, fields):
        return []
    others = [f for f in fields if f != "lr"]
    groups: dict[tuple, list[Variant]] = {}
    for v in variants:
        groups.setdefault(tuple(v.params.get(f) for f in others), []).append(v)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: [sort_key(x) for x in kv[0]]):
        variant = dict(zip(others, key, strict=True))
        entry = {"variant": variant, "label": label(variant, others), **lr_curve(members)}
        out.append(entry)
    on_common_grid(out)
    assign_ranks(out)
    return out


def on_common_grid(entries: list[dict[str, Any]]) -> None:
    """Each entry's LR sensitivity over the rates every variant ran (``sensitivity_lrs``): a
    variant with extra rates (a widened grid) is compared over the same ones as the rest; None
    when fewer than two rates are common. An arm run at one rate only (an experiment's extra
    arm, e.g. the ViT's V3 arm) has no curve: it gets None and leaves the others' grid alone."""
    drawn = [e for e in entries if e["lrs"]]
    curves = [e for e in drawn if len(e["lrs"]) > 1]
    common = set.intersection(*(set(e["lrs"]) for e in curves)) if curves else set()
    for e in drawn:
        curve = {p["lr"]: p["loss"] for p in e["points"] if p["lr"] in common}
        e["sensitivity_lrs"] = sorted(common)
        e["lr_sensitivity"] = sensitivity(curve) if len(curve) > 1 else None
        e["lr_sensitivity_per_seed"] = per_seed_sensitivity(
            [p for p in e["points"] if p["lr"] in common]
        )


def markdown(entries: list[dict[str, Any]]) -> list[str]:
    """The report's section: one row per variant, best lr first."""
    if not entries:
        return []
    out = [
        "## Learning-rate sensitivity",
        "",
        "Final val loss against the learning rate, each variant at its own best lr; LR "
        "sensitivity = mean over the swept lrs of min(l(lr), l0) - l* (Wortsman et al. 2023; a "
        "diverged run counts at l0, the loss at init). `edge`: the best lr is the smallest or "
        "largest swept, so the grid may not hold the variant's best. `diverged`, `stalled`, "
        "`did not train (k diverged, m stalled)`: no run at the variant's best lr trained (each "
        "diverged, or ended on the unigram or chance plateau), so its curve measures nothing "
        "learned; such variants are listed last, unranked. `rank`: 1 + the "
        "number of variants significantly better at their best lr (pairwise Welch tests over the "
        "seeds there, Holm-adjusted at 5%); variants no test separates share a rank. LR "
        "sensitivity is taken over the rates every variant ran (a widened variant's extra rates "
        "left out), so the variants share one grid. The curve and the best lr come from the "
        "grid's seeds; where fresh seeds ran at the best lr (`fresh seeds`), the loss, its "
        "interval and the rank are theirs. `per seed`: each seed's own sensitivity over the "
        "rates it ran, mean and 95% interval over those seeds. `trains up to`: from the best "
        "rate upward, the largest at which every run trained; `unstable at`: the next, where a "
        "run diverged or stalled (`–`: the grid's top rate still trains).",
        "",
        "| rank | variant | lrs | best lr | final val loss at best lr (95% interval) | "
        "LR sensitivity (per seed) | trains up to | unstable at | l0 | edge |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in ranked(entries):
        lrs = ", ".join(f"{x:g}" for x in e["lrs"])
        l0 = "–" if e["l0"] is None else f"{e['l0']:.3f}"
        mean, sd, n = best_point(e)
        lo, hi = stats.interval_from(mean, sd, n)
        span = f" [{lo:.3f}, {hi:.3f}]" if math.isfinite(hi - lo) else ""
        fresh = f", {n} fresh seeds" if "confirm" in e else ""
        up_to, unstable = e.get("trains_up_to"), e.get("unstable_at")
        out.append(
            f"| {rank_text(e)} | {md_cell(e['label'])} | {lrs} | {e['best_lr']:g} | "
            f"{mean:.4f}{span}{fresh} | {sensitivity_text(e)} | "
            f"{'–' if up_to is None else f'{up_to:g}'} | "
            f"{'–' if unstable is None else f'{unstable:g}'} | {l0} | "
            f"{'yes' if e['edge'] else 'no'} |"
        )
    advice = widen_advice(entries)
    return [*out, "", *(f"**{line}**" for line in advice), *([""] if advice else [])]


def y_range(drawn: list[dict[str, Any]]) -> tuple[float, float]:
    """The loss axis: the rates at which every run trained (± one std), padded, so 0.01-nat
    differences near the best rates show; the rest (stalled, diverged) run off the top."""
    trained = [p for e in drawn for p in e["points"] if trained_everywhere(p)]
    spans = [(p["loss"] - (p["std"] or 0.0), p["loss"] + (p["std"] or 0.0)) for p in trained]
    spans = spans or [(p["loss"], p["loss"]) for e in drawn for p in e["points"]]
    low, high = min(lo for lo, _ in spans), max(hi for _, hi in spans)
    pad = max(0.08 * (high - low), 0.01)
    return low - pad, high + 2 * pad


def plot(
    entries: list[dict[str, Any]], out_dir: Path, name: str = "lr_sensitivity.png"
) -> str | None:
    """Final val loss against lr (log axis), one line per variant with a ± one std seed band,
    the best lr of each variant circled; the loss axis fits the rates where every run trained
    (``y_range``), a rate with a diverged run marked x at its top edge."""
    from analysis.xy import LINESTYLES, colour_label, plt, save, variant_colors

    drawn = [e for e in entries if e["lrs"]]
    if not drawn:
        return None
    # The report's colours (one per variant in every figure); depth, when swept, as line style.
    fields = list(drawn[0]["variant"])
    colors = variant_colors([e["variant"] for e in entries], fields)
    depths = sorted({e["variant"].get("n_layer") for e in drawn}, key=sort_key)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for e in drawn:
        color, points = colors[colour_label(e["variant"], fields)], e["points"]
        depth_ls = LINESTYLES[depths.index(e["variant"].get("n_layer")) % len(LINESTYLES)]
        xs = [p["lr"] for p in points]
        ys = [p["loss"] for p in points]
        std = [p["std"] or 0.0 for p in points]
        ax.fill_between(
            xs, [y - s for y, s in zip(ys, std, strict=True)],
            [y + s for y, s in zip(ys, std, strict=True)], color=color, alpha=0.2, lw=0,
        )  # fmt: skip
        edge = ", best at the grid's edge" if e["edge"] else ""
        if e.get("did_not_train"):
            tag = f"{e['label']} ({(e.get('untrained') or 'did not train').upper()} at its best lr)"
        elif e["lr_sensitivity"] is None:
            tag = f"{e['label']} (no sensitivity: {len(e['lrs'])} rate(s) on the common grid)"
        else:
            tag = f"{e['label']} (sensitivity {e['lr_sensitivity']:.3f}{edge})"
        faint = 0.45 if e.get("did_not_train") else 1.0
        ax.plot(xs, ys, marker="o", ls=depth_ls, color=color, lw=1.6, ms=4, label=tag, alpha=faint)
        ax.plot([e["best_lr"]], [e["best_val_loss"]], "o", mfc="none", mec=color, ms=11, mew=1.5)
    low, high = y_range(drawn)
    for e in drawn:
        color = colors[colour_label(e["variant"], fields)]
        for p in e["points"]:  # at the top edge: the axis follows the runs that trained
            if p["diverged"]:
                ax.plot([p["lr"]], [high], "x", color=color, ms=9, mew=2, clip_on=False)
    ax.set_ylim(low, high)
    l0s = [e["l0"] for e in drawn if e["l0"] is not None]
    if l0s and statistics.fmean(l0s) < high:
        ax.axhline(statistics.fmean(l0s), color="gray", ls="--", lw=0.8, label="loss at init (l0)")
    ax.set_xscale("log")
    lrs = sorted({x for e in drawn for x in e["lrs"]})
    ax.set_xticks(lrs, [f"{x:g}" for x in lrs])
    ax.minorticks_off()
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final val loss (x at the top: a run diverged)")
    ax.set_title("final val loss vs learning rate (mean ± std over seeds)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save(fig, out_dir, name)
