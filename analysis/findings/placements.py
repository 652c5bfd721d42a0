"""The placements since 2020: the curse of depth and LayerNorm Scaling (F9), Admin (F11).

F9 reads each run's block profile at its last probe (analysis/block_profile.py: per
block, the mean cosine between its input and output and the RMS of its output, as the
block_cos and act_norm probes logged them); F11 and the placement study read best val losses.

Margins (RMS_GROWTH, NEAR_ONE, COS_DROP, FAILS, CLOSE): each claim's registry entry, their values
and reasons in analysis/findings/claims.py.
"""

from __future__ import annotations

import statistics

from analysis import stats
from analysis.block_profile import last_profile
from analysis.findings.common import (
    MIN_SEEDS,
    Check,
    NoData,
    Verdict,
    decide_all,
    decide_interval,
    diff,
    finished_runs,
    mean_score,
    measure,
    too_few,
    untestable,
    values,
    variant,
)
from analysis.findings.settings import ReproduceConfig


# --- F9: the curse of depth ----------------------------------------------------------------------
def halves(profile: dict[str, list[float]]) -> dict[str, float]:
    """One run's summary: mean cosine of the earlier and later half of the blocks, and the RMS
    growth over the later half (after the last block / after block L/2)."""
    cos, rms = profile["cos"], profile["rms"]
    mid = len(cos) // 2
    return {
        "cos_early": statistics.fmean(cos[:mid]),
        "cos_late": statistics.fmean(cos[mid:]),
        "rms_growth": rms[-1] / rms[mid - 1],
    }


def profiled(report: dict, placement: str) -> tuple[list[dict[str, float]], int]:
    """halves() of each completed run of the placement at the sweep's deepest depth (one a
    seed), and that depth."""
    depth = max(values(report, "n_layer"), default=None)
    if depth is None or depth < 4:
        raise NoData(f"deepest depth {depth}: need >= 4 blocks to compare halves")
    row = variant(report, placement=placement, n_layer=depth)
    runs = [r for r in finished_runs(row) if r["status"] == "completed"]
    found = [halves(p) for p in (last_profile(r["run_dir"], depth) for r in runs) if p]
    if len(found) < MIN_SEEDS:
        raise too_few(row, len(found), "completed runs with block_cos and act_norm logged")
    return found, depth


def seeds_of(runs: list[dict[str, float]], key: str) -> list[float]:
    return [h[key] for h in runs]


def f9_rms_grows(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    runs, depth = profiled(report, "pre")
    growth = seeds_of(runs, "rms_growth")
    v.threshold = (
        f"Pre-LN: RMS after block L / RMS after block L/2 >= {m.rms_growth} (95% interval)"
    )
    return decide_interval(v, "RMS after L / after L/2", stats.ratio_interval(growth), m.rms_growth,
                           "above", depth=depth, growth=statistics.fmean(growth))  # fmt: skip


def f9_late_blocks_idle(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    runs, depth = profiled(report, "pre")
    early, late = seeds_of(runs, "cos_early"), seeds_of(runs, "cos_late")
    v.threshold = (
        f"Pre-LN: later-half mean cos >= {m.near_one} and > earlier half's (95% intervals)"
    )
    measure(v, depth=depth, cos_early=statistics.fmean(early), cos_late=statistics.fmean(late))
    parts = {
        "later-half cos": (stats.mean_interval(late), m.near_one, "above"),
        "later - earlier cos": (stats.diff_interval(late, early), 0.0, "above"),
    }
    return decide_all(v, parts)


def f9_lns_lowers_cos(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    """Rests on F9a: LNS lowers the later blocks' cosine by damping a variance that grows with
    depth, so where Pre-LN's RMS growth over the later half is measured below RMS_GROWTH (its
    interval wholly under it: F9a FAIL) the claim is NOT TESTABLE. Rule set with the interval
    verdicts, before the sweep they decided ran."""
    m = v.margins
    (pre, depth), (lns, _) = profiled(report, "pre"), profiled(report, "lns")
    pre_late, lns_late = seeds_of(pre, "cos_late"), seeds_of(lns, "cos_late")
    v.threshold = f"later-half mean cos: pre - lns >= {m.cos_drop} (95% interval)"
    shown = {"depth": depth, "pre": statistics.fmean(pre_late), "lns": statistics.fmean(lns_late)}
    growth = stats.ratio_interval(seeds_of(pre, "rms_growth"))
    if growth.hi < m.rms_growth:
        reason = (
            f"Pre-LN's RMS grew only x{growth.effect:.2f} [{growth.lo:.2f}, {growth.hi:.2f}] over "
            f"the later half at depth {depth}: no depth-wise variance growth for LNS to damp"
        )
        return untestable(v, reason, **shown)
    return decide_interval(v, "pre - lns later-half cos", stats.diff_interval(pre_late, lns_late),
                           m.cos_drop, "above", **shown)  # fmt: skip


# --- F11: Admin ----------------------------------------------------------------------------------
def deepest(report: dict) -> int:
    depth = max(values(report, "n_layer"), default=None)
    if depth is None:
        raise NoData("no depths in the report")
    return depth


def stalls_above(worse: str, better: str) -> Check:
    """Claim check: at the deepest depth ``worse`` ends at least FAILS above ``better``, or
    diverged (F11: Post-LN above Pre-LN, and above Admin)."""

    def check(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
        m = v.margins
        depth = deepest(report)
        rows = [variant(report, placement=p, n_layer=depth) for p in (worse, better)]
        a, b = map(mean_score, rows)
        v.threshold = f"{worse} diverged, or {worse} - {better} >= {m.fails} (95% interval)"
        return decide_interval(v, f"{worse} - {better}", diff(*rows), m.fails, "above",
                               depth=depth, **{worse: a, better: b})  # fmt: skip

    return check


def no_worse(candidate: str, reference: str, every_depth: bool) -> Check:
    """Claim check: ``candidate`` ends at most CLOSE above ``reference``, at the deepest depth or
    at every depth (F9: LNS vs Pre-LN; F11: Admin vs Pre-LN)."""

    def check(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
        m = v.margins
        depths = values(report, "n_layer") if every_depth else [deepest(report)]
        if not depths:
            raise NoData("no depths in the report")
        measured, parts = {}, {}
        for depth in depths:
            rows = [variant(report, placement=p, n_layer=depth) for p in (candidate, reference)]
            a, b = map(mean_score, rows)
            measured[f"L{depth}_{candidate}"], measured[f"L{depth}_{reference}"] = a, b
            parts[f"L{depth} {candidate} - {reference}"] = (diff(*rows), m.close, "below")
        where = "at every depth" if every_depth else "at the deepest depth"
        v.threshold = f"{candidate} - {reference} <= {m.close}, {where} (95% interval)"
        measure(v, **measured)
        return decide_all(v, parts)

    return check
