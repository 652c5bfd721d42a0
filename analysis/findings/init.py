"""F1 (Xiong et al. 2020): gradients and residual norms at initialization against depth, from
the report's init-probe groups, each claim on its 95% interval over the probe's seeds (each seed
a freshly initialized model at every depth; analysis/stats.py).

Thresholds on log-log slopes: flat |slope| < 0.15 (theory 0), shrinking < -0.3 (theory -0.5);
residual norm last/first layer within [1/1.5, 1.5] (flat) or >= 2 (growing). A probe.json
without per-seed values (written before they were recorded) gives NO DATA: rerun f1.
"""

from __future__ import annotations

import statistics

from analysis import stats
from analysis.findings.common import NoData, Verdict, decide_all, decide_interval, rnd
from analysis.runs import log_slope

FLAT_SLOPE, SHRINK_SLOPE, FLAT_RATIO, GROW_RATIO = 0.15, -0.3, 1.5, 2.0


def probe_series(report: dict, placement: str) -> list[dict]:
    groups = [g for g in report.get("init_probe", []) if g["params"].get("placement") == placement]
    groups.sort(key=lambda g: g["params"]["n_layer"])
    if len(groups) < 2:
        raise NoData(f"init probe for placement={placement}: {len(groups)} depths, need >= 2")
    return groups


def seed_values(group: dict, key: str) -> list[float]:
    found = (group.get("per_seed") or {}).get(key) or []
    if len(found) < 2:
        raise NoData(f"probe.json has {len(found)} per-seed {key} values, need >= 2: rerun f1")
    return found


def fc2_slopes(report: dict, placement: str) -> tuple[list[float], dict]:
    """One log-log slope of the last FFN gradient against depth per seed, and the means."""
    groups = probe_series(report, placement)
    depths = [g["params"]["n_layer"] for g in groups]
    per_depth = [seed_values(g, "last_fc2") for g in groups]
    n = min(len(xs) for xs in per_depth)
    slopes = [log_slope(depths, [xs[i] for xs in per_depth]) for i in range(n)]
    means = {f"L{d}": rnd(statistics.fmean(xs), 5) for d, xs in zip(depths, per_depth, strict=True)}
    return slopes, means


def residual_ratios(report: dict, placement: str) -> tuple[list[float], int]:
    deepest = probe_series(report, placement)[-1]
    return seed_values(deepest, "act_ratio"), deepest["params"]["n_layer"]


def f1_post_grad_flat(report: dict, settings: dict, v: Verdict) -> Verdict:
    slopes, per_depth = fc2_slopes(report, "post")
    v.threshold = f"|slope| < {FLAT_SLOPE} (95% interval)"
    return decide_interval(v, "slope", stats.mean_interval(slopes), FLAT_SLOPE, "within",
                           last_fc2_grad=per_depth)  # fmt: skip


def f1_pre_grad_shrinks(report: dict, settings: dict, v: Verdict) -> Verdict:
    slopes, per_depth = fc2_slopes(report, "pre")
    v.threshold = f"slope < {SHRINK_SLOPE} (95% interval)"
    return decide_interval(v, "slope", stats.mean_interval(slopes), SHRINK_SLOPE, "below",
                           last_fc2_grad=per_depth)  # fmt: skip


def f1_post_residual_flat(report: dict, settings: dict, v: Verdict) -> Verdict:
    ratios, depth = residual_ratios(report, "post")
    ci = stats.ratio_interval(ratios)
    v.threshold = f"1/{FLAT_RATIO} <= last/first <= {FLAT_RATIO} (95% interval)"
    v.measured.update(depth=depth)
    parts = {
        "last/first (low side)": (ci, 1 / FLAT_RATIO, "above"),
        "last/first (high side)": (ci, FLAT_RATIO, "below"),
    }
    return decide_all(v, parts)


def f1_pre_residual_grows(report: dict, settings: dict, v: Verdict) -> Verdict:
    ratios, depth = residual_ratios(report, "pre")
    v.threshold = f"last/first >= {GROW_RATIO} (95% interval)"
    return decide_interval(v, "last/first", stats.ratio_interval(ratios), GROW_RATIO, "above",
                           depth=depth)  # fmt: skip
