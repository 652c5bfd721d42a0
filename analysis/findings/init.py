"""F1 (Xiong et al. 2020): gradients and residual norms at initialization against depth, from
the report's init-probe groups, each claim on its 95% interval over the probe's seeds (each seed
a freshly initialized model at every depth; analysis/stats.py).

Margins (each claim's registry entry; analysis/findings/claims.py): log-log slopes flat under
FLAT_SLOPE (theory 0), shrinking under SHRINK_SLOPE (theory -0.5); residual norm last/first
layer within [1/FLAT_RATIO, FLAT_RATIO] (flat) or at least GROW_RATIO (growing). A probe.json
without per-seed values (written before they were recorded) gives NO DATA: rerun f1.
"""

from __future__ import annotations

import statistics

from analysis import stats
from analysis.findings.common import NoData, Verdict, decide_all, decide_interval, rnd
from analysis.findings.settings import ReproduceConfig
from runs.numbers import log_slope


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


def f1_post_grad_flat(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    slopes, per_depth = fc2_slopes(report, "post")
    v.threshold = f"|slope| < {m.flat_slope} (95% interval)"
    return decide_interval(v, "slope", stats.mean_interval(slopes), m.flat_slope, "within",
                           last_fc2_grad=per_depth)  # fmt: skip


def f1_pre_grad_shrinks(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    slopes, per_depth = fc2_slopes(report, "pre")
    v.threshold = f"slope < {m.shrink_slope} (95% interval)"
    return decide_interval(v, "slope", stats.mean_interval(slopes), m.shrink_slope, "below",
                           last_fc2_grad=per_depth)  # fmt: skip


def f1_post_residual_flat(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    ratios, depth = residual_ratios(report, "post")
    ci = stats.ratio_interval(ratios)
    v.threshold = f"1/{m.flat_ratio} <= last/first <= {m.flat_ratio} (95% interval)"
    v.measured.update(depth=depth)
    parts = {
        "last/first (low side)": (ci, 1 / m.flat_ratio, "above"),
        "last/first (high side)": (ci, m.flat_ratio, "below"),
    }
    return decide_all(v, parts)


def f1_pre_residual_grows(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    ratios, depth = residual_ratios(report, "pre")
    v.threshold = f"last/first >= {m.grow_ratio} (95% interval)"
    return decide_interval(v, "last/first", stats.ratio_interval(ratios), m.grow_ratio, "above",
                           depth=depth)  # fmt: skip
