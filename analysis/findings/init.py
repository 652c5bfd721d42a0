"""F1 (Xiong et al. 2020): gradients and residual norms at initialization against depth, from
the report's init-probe groups.

Thresholds on log-log slopes: flat |slope| < 0.15 (theory 0), shrinking < -0.3 (theory -0.5);
residual norm last/first layer within [1/1.5, 1.5] (flat) or >= 2 (growing).
"""

from __future__ import annotations

from analysis.findings.common import NoData, Verdict, decide, rnd
from analysis.runs import log_slope

FLAT_SLOPE, SHRINK_SLOPE, FLAT_RATIO, GROW_RATIO = 0.15, -0.3, 1.5, 2.0


def probe_series(report: dict, placement: str) -> list[dict]:
    groups = [g for g in report.get("init_probe", []) if g["params"].get("placement") == placement]
    groups.sort(key=lambda g: g["params"]["n_layer"])
    if len(groups) < 2:
        raise NoData(f"init probe for placement={placement}: {len(groups)} depths, need >= 2")
    return groups


def fc2_slope(report: dict, placement: str) -> tuple[float, dict]:
    groups = probe_series(report, placement)
    depths = [g["params"]["n_layer"] for g in groups]
    fc2 = [g["last_fc2"] for g in groups]
    return log_slope(depths, fc2), {f"L{d}": rnd(v, 5) for d, v in zip(depths, fc2, strict=True)}


def residual_ratio(report: dict, placement: str) -> tuple[float, int]:
    deepest = probe_series(report, placement)[-1]
    act = deepest["act_norm"]
    return act[-1] / act[0], deepest["params"]["n_layer"]


def f1_post_grad_flat(report: dict, settings: dict, v: Verdict) -> Verdict:
    slope, per_depth = fc2_slope(report, "post")
    v.threshold = f"|slope| < {FLAT_SLOPE}"
    return decide(v, abs(slope) < FLAT_SLOPE, slope=slope, last_fc2_grad=per_depth)


def f1_pre_grad_shrinks(report: dict, settings: dict, v: Verdict) -> Verdict:
    slope, per_depth = fc2_slope(report, "pre")
    v.threshold = f"slope < {SHRINK_SLOPE}"
    return decide(v, slope < SHRINK_SLOPE, slope=slope, last_fc2_grad=per_depth)


def f1_post_residual_flat(report: dict, settings: dict, v: Verdict) -> Verdict:
    ratio, depth = residual_ratio(report, "post")
    v.threshold = f"1/{FLAT_RATIO} <= last/first <= {FLAT_RATIO}"
    return decide(v, 1 / FLAT_RATIO <= ratio <= FLAT_RATIO, ratio=ratio, depth=depth)


def f1_pre_residual_grows(report: dict, settings: dict, v: Verdict) -> Verdict:
    ratio, depth = residual_ratio(report, "pre")
    v.threshold = f"last/first >= {GROW_RATIO}"
    return decide(v, ratio >= GROW_RATIO, ratio=ratio, depth=depth)
