"""Norm types: F5 (RMSNorm matches LayerNorm, Zhang & Sennrich 2019) and F7 (BatchNorm depends
on the batch size; LayerNorm and RMSNorm do not).
"""

from __future__ import annotations

import statistics

from analysis.findings.common import (
    CLOSE,
    MIN_SEEDS,
    NoData,
    Verdict,
    decide,
    decide_all,
    diff,
    finished,
    mean_score,
    measure,
    too_few,
    values,
    variant,
)


# --- F5: norms -----------------------------------------------------------------------------------
def rmsnorm_matches(report: dict, settings: dict, v: Verdict) -> Verdict:
    placements = values(report, "placement")
    if not placements:
        raise NoData("no placements in the report")
    measured, parts = {}, {}
    for p in placements:
        ln_row = variant(report, placement=p, norm="layernorm")
        rms_row = variant(report, placement=p, norm="rmsnorm")
        ln, rms = mean_score(ln_row), mean_score(rms_row)
        measured[f"{p}_layernorm"], measured[f"{p}_rmsnorm"] = ln, rms
        parts[f"{p} rmsnorm - layernorm"] = (diff(rms_row, ln_row), CLOSE, "within")
        tput = [
            variant(report, placement=p, norm=n)["throughput"] for n in ("rmsnorm", "layernorm")
        ]
        if all(tput):
            measured[f"{p}_throughput_ratio"] = round(tput[0]["mean"] / tput[1]["mean"], 3)
    v.threshold = f"rmsnorm - layernorm within ±{CLOSE} for each placement (95% interval)"
    measure(v, **measured)
    return decide_all(v, parts)


# --- F7: batch statistics ------------------------------------------------------------------------
# Accuracy in [0, 1]: the mean over seeds of each run's best val accuracy (a diverged run
# scores 0). Best, not final: it favours a noisy variant, so a BatchNorm drop is no luck of the
# last evaluation. Thresholds (digits' val split holds 360 images: 0.02 = 7 images; the seed std
# of one variant at the CPU size is 0.002-0.014):
#   ACC_GAP = 0.02   BatchNorm's drop from the largest to the smallest batch exceeds LayerNorm's
#                    and RMSNorm's by at least this
#   ACC_FLAT = 0.02  "does not depend on the batch": max - min over batch sizes at most this
ACC_GAP, ACC_FLAT = 0.02, 0.02
BATCH = "data.batch_size"


def mean_acc(row: dict) -> float:
    accs = [
        float(r["best_val_acc"])
        if r["status"] == "completed" and isinstance(r.get("best_val_acc"), int | float)
        else 0.0
        for r in finished(row)
    ]
    if len(accs) < MIN_SEEDS:
        raise too_few(row, len(accs))
    return statistics.fmean(accs)


def acc_by_batch(report: dict, norm: str) -> dict[int, float]:
    batches = values(report, BATCH)
    if len(batches) < 2:
        raise NoData(f"batch sizes {batches}: need >= 2")
    return {b: mean_acc(variant(report, norm=norm, **{BATCH: b})) for b in batches}


def f7_batchnorm_degrades(report: dict, settings: dict, v: Verdict) -> Verdict:
    drops, measured = {}, {}
    for norm in ("batchnorm", "layernorm", "rmsnorm"):
        acc = acc_by_batch(report, norm)
        small, large = min(acc), max(acc)
        drops[norm] = acc[large] - acc[small]
        measured[norm] = f"b{large} {acc[large]:.3f} -> b{small} {acc[small]:.3f}"
    worst_other = max(drops["layernorm"], drops["rmsnorm"])
    gap = drops["batchnorm"] - worst_other
    v.threshold = f"batchnorm drop - max(layernorm, rmsnorm drop) >= {ACC_GAP}"
    return decide(v, gap >= ACC_GAP, **measured, batchnorm_drop=drops["batchnorm"], gap=gap)


def f7_token_norms_flat(report: dict, settings: dict, v: Verdict) -> Verdict:
    measured, ok = {}, True
    for norm in ("layernorm", "rmsnorm"):
        acc = acc_by_batch(report, norm)
        spread = max(acc.values()) - min(acc.values())
        measured[norm] = {f"b{b}": round(a, 4) for b, a in acc.items()}
        measured[f"{norm}_spread"] = spread
        ok = ok and spread <= ACC_FLAT
    v.threshold = f"max - min over batch sizes <= {ACC_FLAT}, for each"
    return decide(v, ok, **measured)
