"""One effect of a claim from the runs it reads (analysis/findings/select.py): its estimate,
95% interval (or exact test), outcome against its margin and one-sided p-values.

Differences of means on Welch's t interval; paired differences on the t interval of per-seed
differences; ratios of positive measures on the logs; log-log slopes per seed; rates with exact
Clopper-Pearson intervals, two rates (or the runs a measure picks against the rest) by Fisher's
exact test; seed pairs where one arm ends worse as a rate; "every run" as the rate of runs off
the margin's side against EVERY_OFF (exact); per-seed statistics of the loss-vs-lr curve (where
the optimum sits held against its margin widened by the grid's known bias, vertex_bias). PASS when
the interval lies on the claim's side of the margin, FAIL when on the other, INCONCLUSIVE when
it straddles (a test: one-sided p <= ALPHA in the claim's direction, or in the other).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import replace
from itertools import pairwise
from typing import Any

from scipy.stats import binomtest

from analysis import stats
from analysis.findings.declare import EVERY_OFF, Part
from analysis.findings.select import NoData, Reading, key_values, label, matching, resolve, same
from analysis.lr_sweep import capped, sensitivity
from runs.numbers import log_slope

MIN_SEEDS = 2  # values per arm an interval needs
ALPHA = 0.025  # one-sided: a 95% two-sided interval clears its margin exactly when p <= ALPHA


def values(runs: list[dict], measure: str, among: str = "completed") -> list[float]:
    runs = [r for r in runs if among != "trained" or r["outcome"] == "trained"]
    return [x for r in runs if (x := r["values"].get(measure)) is not None and math.isfinite(x)]


def enough(runs: list[dict], measure: str, arm: str, among: str = "completed") -> list[float]:
    found = values(runs, measure, among)
    if len(found) < MIN_SEEDS:
        outcomes = dict(Counter(r["outcome"] for r in runs))
        raise NoData(f"{arm}: {len(found)} runs with {measure} ({outcomes}), need >= {MIN_SEEDS}")
    return found


def by_seed(runs: list[dict], measure: str, among: str = "completed") -> dict[Any, float]:
    runs = [r for r in runs if among != "trained" or r["outcome"] == "trained"]
    return {r["seed"]: x for r in runs if (x := r["values"].get(measure)) is not None}


def worse_pairs(part: Part, a: list[dict], b: list[dict]) -> tuple[int, int]:
    """Seeds (run in both arms) where a ends worse than b: a did not train where b did, or both
    trained and a's measure is at least ``part.by`` above b's."""
    other = {r["seed"]: r for r in b}
    pairs = [(r, other[r["seed"]]) for r in a if r["seed"] in other]

    def worse(x: dict, y: dict) -> bool:
        if x["outcome"] != "trained":
            return y["outcome"] == "trained"
        vx, vy = x["values"].get(part.measure), y["values"].get(part.measure)
        return (
            y["outcome"] == "trained" and vx is not None and vy is not None and vx - vy >= part.by
        )

    return sum(worse(x, y) for x, y in pairs), len(pairs)


def fisher(part: Part, k: tuple[int, int], n: tuple[int, int]) -> dict[str, Any]:
    """Two rates compared by Fisher's exact test, one-sided in the claim's direction."""
    if min(n) < 1:
        raise NoData("an arm has no finished runs")
    other = "below" if part.side == "above" else "above"
    p_pass = stats.rate_test(k[0], n[0], k[1], n[1], part.side)
    p_fail = stats.rate_test(k[0], n[0], k[1], n[1], other)
    outcome = "PASS" if p_pass <= ALPHA else "FAIL" if p_fail <= ALPHA else "INCONCLUSIVE"
    return {"effect": k[0] / n[0] - k[1] / n[1], "lo": math.nan, "hi": math.nan, "n": list(n),
            "k": list(k), "method": "Fisher's exact test, one-sided", "scale": "rate",
            "outcome": outcome, "p_pass": p_pass, "p_fail": p_fail}  # fmt: skip


def meets(x: float | None, side: str, value: float) -> bool:
    return x is not None and (x <= value if side == "below" else x >= value)


# --- loss-vs-lr curves ---------------------------------------------------------------------------
def span_up(curve: dict[float, float], within: float) -> float:
    """The largest lr whose loss (and every one between) is within ``within`` of the curve's
    best, over the best lr: how far above its best rate the loss stays flat."""
    lrs = sorted(curve)
    i = j = lrs.index(min(curve, key=curve.get))
    while j < len(lrs) - 1 and curve[lrs[j + 1]] <= curve[lrs[i]] + within:
        j += 1
    return lrs[j] / lrs[i]


def log_best_lr(curve: dict[float, float]) -> float:
    """log10 of the curve's loss-optimal lr, between grid points: the vertex of the parabola
    through the best rate and its two neighbours in log10(lr), kept between those neighbours
    (Yang et al. 2022 read the optimum off such curves); at the grid's edge, the edge rate."""
    lrs = sorted(curve)
    i = lrs.index(min(curve, key=curve.get))
    x = [math.log10(lr) for lr in lrs]
    if i in (0, len(lrs) - 1):
        return x[i]
    (x0, x1, x2), (y0, y1, y2) = x[i - 1 : i + 2], [curve[lr] for lr in lrs[i - 1 : i + 2]]
    den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
    if den == 0:  # three equal losses: no curvature to place a vertex by
        return x1
    vertex = x1 - 0.5 * ((x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)) / den
    return min(max(vertex, x0), x2)


# log_best_lr's calibration: curves up to this many times steeper on one side of the optimum than
# on the other (F14's own curves, fitted with a two-sided parabola on five rates: median 2.9x,
# 90th percentile 5.9x, steeper below the optimum)
LR_ASYMMETRY = 6.0


def vertex_bias(step: float, asymmetry: float = LR_ASYMMETRY, offsets: int = 201) -> float:
    """How much log_best_lr's error can differ between two curves of one shape whose optima sit
    at different places between grid points ``step`` decades apart: the range over those places
    of (vertex - true optimum) for a loss (x - x*)^2 on one side of the optimum and ``asymmetry``
    x (x - x*)^2 on the other, the larger of both sides' (it grows with the asymmetry; 0 for a
    symmetric curve, where the vertex is exact)."""
    grid = [step * i for i in range(-3, 4)]
    worst = 0.0
    for steep in (asymmetry, 1 / asymmetry):
        errors = []
        for j in range(offsets):
            star = step * j / (offsets - 1)
            curve = {10**x: (x - star) ** 2 * (steep if x > star else 1.0) for x in grid}
            errors.append(log_best_lr(curve) - star)
        worst = max(worst, max(errors) - min(errors))
    return worst


def grid_step(arms: list[list[dict[float, float]]]) -> float:
    """The widest step, in decades, between neighbouring rates of any curve."""
    steps = [math.log10(b / a) for arm in arms for c in arm for a, b in pairwise(sorted(c))]
    return max(steps)


def at_edge(curve: dict[float, float]) -> bool:
    """Whether the curve's best lr is the grid's smallest or largest: the optimum may lie past
    it, so log_best_lr is censored there (it returns the edge rate, not the optimum)."""
    lrs = sorted(curve)
    return min(curve, key=curve.get) in (lrs[0], lrs[-1])


SPAN_WITHIN = 0.10  # "similar loss": within this of the curve's best (F13c)
CURVE_STATS = {
    "sensitivity": sensitivity,  # Wortsman et al. 2023: E_lr[l(lr) - l*]
    "best": lambda curve: min(curve.values()),
    "span_up": lambda curve: span_up(curve, SPAN_WITHIN),
    "log_best_lr": log_best_lr,  # F14: where the optimum sits, in decades of lr
}


def seed_curves(runs: list[dict], arm: str) -> list[dict[float, float]]:
    """One loss-vs-lr curve per seed that ran at every lr (at least 3): each run's final val
    loss capped at l0, the arm's mean first train loss (a diverged run counts at l0)."""
    lrs = key_values(runs, "lr")
    if len(lrs) < 3:
        raise NoData(f"{arm}: learning rates {lrs}, need >= 3")
    firsts = values(runs, "first_train_loss")
    if not firsts:
        raise NoData(f"{arm}: no run logged a train loss")
    l0 = statistics.fmean(firsts)
    seeds = set.intersection(*({r["seed"] for r in runs if same(r["arm"]["lr"], lr)} for lr in lrs))
    curves = [
        {r["arm"]["lr"]: capped(r["values"].get("final_val_loss"), l0)
         for r in runs if r["seed"] == seed}
        for seed in sorted(seeds, key=str)
    ]  # fmt: skip
    if len(curves) < MIN_SEEDS:
        raise NoData(f"{arm}: {len(curves)} seeds ran at every lr, need >= {MIN_SEEDS}")
    return curves


def curve_stat(part: Part, curves: list[dict[float, float]]) -> list[float]:
    return [CURVE_STATS[part.stat](c) for c in curves]


# --- estimands -----------------------------------------------------------------------------------
def interval_effect(ci: stats.Interval, part: Part, allowance: float = 0.0) -> dict[str, Any]:
    """The effect's outcome and p-values against its margin; ``allowance`` (an estimator's
    known bias bound, in the effect's units) moves the margin against the claim for each test:
    PASS must clear margin + allowance on its side, FAIL lie past margin - allowance."""
    m, side = part.margin, part.side
    strict, loose = (
        (m + allowance, m - allowance) if side == "above" else (m - allowance, m + allowance)
    )  # fmt: skip  (below and within tighten)
    passes = stats.outcome(ci, strict, side) == "PASS"
    outcome = "PASS" if passes else stats.outcome(ci, loose, side).replace("PASS", "INCONCLUSIVE")
    flip = {"above": "below", "below": "above"}
    try:  # FAIL's test: beyond the margin on the other side (within: outside either bound)
        p_pass = stats.one_sided_p(ci, strict, side)
        p_fail = (stats.one_sided_p(ci, loose, flip[side]) if side in flip
                  else min(stats.one_sided_p(ci, loose, "above"),
                           stats.one_sided_p(ci, -loose, "below")))  # fmt: skip
    except ValueError:
        p_pass = p_fail = None
    out = {"effect": ci.effect, "lo": ci.lo, "hi": ci.hi, "n": list(ci.n), "sd": list(ci.sd),
           "method": ci.method, "scale": ci.scale, "outcome": outcome,
           "p_pass": p_pass, "p_fail": p_fail}  # fmt: skip
    if outcome == "INCONCLUSIVE":
        out["seeds_needed"] = stats.seeds_needed(ci, part.margin, part.side)
    return out


def per_decade(ci: stats.Interval, lrs: tuple[float, float]) -> stats.Interval:
    k = 1 / abs(math.log10(lrs[0] / lrs[1]))
    return replace(ci, effect=ci.effect**k, lo=ci.lo**k, hi=ci.hi**k,
                   sd=tuple(x * k for x in ci.sd))  # fmt: skip


def rate_effect(k: int, n: int, part: Part) -> dict[str, Any]:
    if n < 1:
        raise NoData("no finished runs to count")
    lo, hi = stats.rate_interval(k, n)
    ci = stats.Interval(k / n, lo, hi, (n,), (math.nan,), "Clopper-Pearson")
    alt = {"above": "greater", "below": "less"}
    p_pass = binomtest(k, n, part.margin, alternative=alt[part.side]).pvalue
    p_fail = binomtest(k, n, part.margin, alternative=alt["below" if part.side == "above"
                                                             else "above"]).pvalue  # fmt: skip
    return {"effect": k / n, "lo": lo, "hi": hi, "n": [n], "k": [k], "method": ci.method,
            "scale": "rate", "outcome": stats.outcome(ci, part.margin, part.side),
            "p_pass": float(p_pass), "p_fail": float(p_fail)}  # fmt: skip


def counted(runs: list[dict], event: str) -> int:
    if event == "not_trained":
        return sum(r["outcome"] != "trained" for r in runs)
    return sum(r["outcome"] == event for r in runs)


def estimate(part: Part, reading: Reading) -> dict[str, Any]:
    """One effect of a claim: its estimate, interval (or test), outcome and p-values."""
    kind = part.estimand
    names = [label(resolve(a, reading.rows, reading.settings)) for a in part.arms]
    rule = "curve" if kind.startswith("curve") or kind == "slope" else None
    runs = [reading.runs(a, rule) for a in part.arms]
    if kind == "rate":
        return rate_effect(counted(runs[0], part.event), len(runs[0]), part)
    if kind == "rate2":
        return fisher(part, tuple(counted(r, part.event) for r in runs), tuple(map(len, runs)))
    if kind == "split":
        measure, side, value = part.where
        inside = [r for r in runs[0] if meets(r["values"].get(measure), side, value)]
        rest = [r for r in runs[0] if r not in inside and r["values"].get(measure) is not None]
        return fisher(part, (counted(inside, part.event), counted(rest, part.event)),
                      (len(inside), len(rest)))  # fmt: skip
    if kind == "pairs":
        return rate_effect(*worse_pairs(part, *runs), part)
    if kind == "every":  # the rate of runs off the margin's side, below EVERY_OFF (exact)
        found = enough(runs[0], part.measure, names[0], part.among)
        off = sum(not (x > part.margin if part.side == "above" else x < part.margin)
                  for x in found)  # fmt: skip
        worst = min(found) if part.side == "above" else max(found)
        out = rate_effect(off, len(found), replace(part, margin=EVERY_OFF, side="below"))
        return {**out, "violations": off, "worst": worst,
                "method": "runs off its side, Clopper-Pearson"}  # fmt: skip
    if kind.startswith("curve"):
        curves = [seed_curves(r, n) for r, n in zip(runs, names, strict=True)]
        stat = [curve_stat(part, c) for c in curves]
        ci = {"curve": lambda: stats.diff_interval(*stat),
              "curve_ratio": lambda: stats.ratio_interval(*stat),
              "curve_level": lambda: stats.mean_interval(stat[0])}[kind]()  # fmt: skip
        if part.stat != "log_best_lr":
            return interval_effect(ci, part)
        # where two optima sit between grid points moves their vertices' difference by up to
        # vertex_bias: the margin is held that much against the claim
        allowance = vertex_bias(grid_step(curves)) if kind == "curve" else 0.0
        out = interval_effect(ci, part, allowance)
        out["grid_bias"] = round(allowance, 6)
        out["censored"] = [sum(at_edge(c) for c in arm) for arm in curves]  # optima at an edge
        return out
    if kind == "slope":
        per_x = {x: by_seed(matching(runs[0], {part.over: x}), part.measure)
                 for x in key_values(runs[0], part.over)}  # fmt: skip
        if len(per_x) < 2:
            raise NoData(f"{names[0]}: {len(per_x)} values of {part.over}, need >= 2")
        seeds = set.intersection(*(set(v) for v in per_x.values()))
        slopes = [
            s
            for seed in sorted(seeds, key=str)
            if (s := log_slope(list(per_x), [v[seed] for v in per_x.values()])) is not None
        ]
        if len(slopes) < MIN_SEEDS:
            raise NoData(f"{names[0]}: {len(slopes)} seeds at every {part.over}")
        return interval_effect(stats.mean_interval(slopes), part)
    if kind == "paired":
        a, b = (by_seed(r, part.measure, part.among) for r in runs)
        if len(set(a) & set(b)) < MIN_SEEDS:
            raise NoData(f"{len(set(a) & set(b))} seeds ran in both arms, need >= {MIN_SEEDS}")
        return interval_effect(stats.paired_interval(a, b), part)
    found = [enough(r, part.measure, n, part.among) for r, n in zip(runs, names, strict=True)]
    if kind == "mean":
        ci = stats.mean_interval(found[0])
    elif kind == "ratio":
        ci = stats.ratio_interval(found[0])
    elif kind == "diff":
        ci = stats.diff_interval(*found)
    elif kind == "contrast" and part.log:
        logs = [[math.log(x) for x in xs] for xs in found]
        ci = stats.contrast_interval(logs, part.weights)
        ci = replace(ci, effect=math.exp(ci.effect), lo=math.exp(ci.lo), hi=math.exp(ci.hi),
                     scale="log")  # fmt: skip
    elif kind == "contrast":
        ci = stats.contrast_interval(found, part.weights)
    else:  # ratio2
        ci = stats.ratio_interval(*found)
        if part.per_decade:
            lrs = tuple(resolve(a, reading.rows, reading.settings)["lr"] for a in part.arms)
            ci = per_decade(ci, lrs)
    return interval_effect(ci, part)
