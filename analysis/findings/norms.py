"""Norm types: F5 (RMSNorm matches LayerNorm, Zhang & Sennrich 2019) and F7 (BatchNorm depends
on the batch size; LayerNorm and RMSNorm do not).
"""

from __future__ import annotations

import itertools
import statistics

from analysis import stats
from analysis.findings.common import (
    MIN_SEEDS,
    NoData,
    Verdict,
    decide_all,
    diff,
    finished_runs,
    mean_score,
    measure,
    too_few,
    values,
    variant,
)
from analysis.findings.settings import ReproduceConfig


# --- F5: norms -----------------------------------------------------------------------------------
def rmsnorm_matches(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    placements = values(report, "placement")
    if not placements:
        raise NoData("no placements in the report")
    measured, parts = {}, {}
    for p in placements:
        ln_row = variant(report, placement=p, norm="layernorm")
        rms_row = variant(report, placement=p, norm="rmsnorm")
        ln, rms = mean_score(ln_row), mean_score(rms_row)
        measured[f"{p}_layernorm"], measured[f"{p}_rmsnorm"] = ln, rms
        parts[f"{p} rmsnorm - layernorm"] = (diff(rms_row, ln_row), m.close, "within")
        tput = [
            variant(report, placement=p, norm=n)["throughput"] for n in ("rmsnorm", "layernorm")
        ]
        if all(tput):
            measured[f"{p}_throughput_ratio"] = round(tput[0]["mean"] / tput[1]["mean"], 3)
    v.threshold = f"rmsnorm - layernorm within ±{m.close} for each placement (95% interval)"
    measure(v, **measured)
    return decide_all(v, parts)


# --- F7: batch statistics ------------------------------------------------------------------------
# Accuracy in [0, 1]: each run's best val accuracy, one value a seed (a diverged run scores 0),
# decided on 95% intervals over seeds (Welch; a drop minus a drop is a contrast of four arms).
# Best, not final: it favours a noisy variant, so a BatchNorm drop is no luck of the last
# evaluation. Margins ACC_GAP and ACC_FLAT: the claims' registry entries (claims.py).
BATCH = "data.batch_size"


def accs(row: dict) -> list[float]:
    """Each finished run's best val accuracy, one a seed (a diverged run scores 0)."""
    found = [
        float(r["best_val_acc"])
        if r["status"] == "completed" and isinstance(r.get("best_val_acc"), int | float)
        else 0.0
        for r in finished_runs(row)
    ]
    if len(found) < MIN_SEEDS:
        raise too_few(row, len(found))
    return found


def acc_by_batch(report: dict, norm: str) -> dict[int, list[float]]:
    batches = values(report, BATCH)
    if len(batches) < 2:
        raise NoData(f"batch sizes {batches}: need >= 2")
    return {b: accs(variant(report, norm=norm, **{BATCH: b})) for b in batches}


def f7_batchnorm_degrades(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    acc = {n: acc_by_batch(report, n) for n in ("batchnorm", "layernorm", "rmsnorm")}
    small, large = min(acc["batchnorm"]), max(acc["batchnorm"])
    for norm, by in acc.items():
        mean = {b: statistics.fmean(xs) for b, xs in by.items()}
        measure(v, **{norm: f"b{large} {mean[large]:.3f} -> b{small} {mean[small]:.3f}"})
    bn = acc["batchnorm"]
    parts = {
        f"batchnorm drop - {other} drop": (
            stats.contrast_interval(
                (bn[large], bn[small], acc[other][large], acc[other][small]), (1, -1, -1, 1)
            ),
            m.acc_gap,
            "above",
        )
        for other in ("layernorm", "rmsnorm")
    }
    v.threshold = (
        f"batchnorm's drop from b{large} to b{small} - each other norm's drop >= {m.acc_gap} "
        "(95% intervals)"
    )
    return decide_all(v, parts)


def f7_token_norms_flat(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    parts = {}
    for norm in ("layernorm", "rmsnorm"):
        acc = acc_by_batch(report, norm)
        measure(v, **{norm: {f"b{b}": round(statistics.fmean(xs), 4) for b, xs in acc.items()}})
        for a, b in itertools.combinations(sorted(acc), 2):
            parts[f"{norm} b{a} - b{b}"] = (
                stats.diff_interval(acc[a], acc[b]),
                m.acc_flat,
                "within",
            )
    v.threshold = f"every pair of batch sizes within ±{m.acc_flat}, for each (95% intervals)"
    return decide_all(v, parts)
