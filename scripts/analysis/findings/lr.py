"""F6 (Wortsman et al. 2023): attention logit growth at high learning rates, QK-norm, and the
learning-rate sensitivity.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from scripts.analysis.findings.common import (
    MIN_SEEDS,
    WORSE,
    NoData,
    Verdict,
    decide,
    finished,
    too_few,
    values,
    variant,
)
from scripts.analysis.runs import run_series

# --- F6: attention logit growth and LR sensitivity (Wortsman et al. 2023) ------------------------
# LR sensitivity, as Wortsman et al. define it: E_lr[min(l(lr), l0) - l*] over the swept learning
# rates, with l(lr) the final loss, l0 the loss at initialization and l* = min_lr l(lr); a run that
# diverged (or ends above l0) counts at l0. Here l(lr) is the mean over seeds of each run's
# min(final val loss, its step-0 train loss). Thresholds:
#   LOGIT_GROWTH = 10  "grows" / "bounded": the max attention logit rises >= 10x over the swept
#                      learning rates (a 100x range), or less; at the top lr QK-norm's is >= 10x
#                      below the unnormed one (the CPU size measures ~400x and ~4x rises)
#   SENS_GAP = 0.03    "lowers the sensitivity": about one seed std of one arm's sensitivity
#   TOP_LRS = 2        "at the highest learning rates": the two largest swept values
LOGIT_GROWTH, SENS_GAP, TOP_LRS = 10.0, 0.03, 2
WORTSMAN = "Wortsman et al. 2023"
QK = "model.qk_norm"


def peak_logit(row: dict) -> float:
    """Mean over seeds of each run's largest logged attn/max_logit."""
    peaks = [
        max(y for _, y in s)
        for r in finished(row)
        if (s := run_series(r["run_dir"], "attn/max_logit"))
    ]
    if len(peaks) < MIN_SEEDS:
        raise too_few(row, len(peaks), "finished runs with attn/max_logit logged")
    return statistics.fmean(peaks)


def capped_loss(run: dict) -> float | None:
    """min(final val loss, initial loss); the initial loss for a run that diverged."""
    start = run_series(run["run_dir"], "train/loss")
    if not start:
        return None
    l0, final = start[0][1], run.get("final_val_loss")
    if run["status"] == "completed" and isinstance(final, int | float) and math.isfinite(final):
        return min(float(final), l0)
    return l0


def lr_losses(report: dict, qk: bool) -> dict[float, dict[Any, float]]:
    """lr -> {seed: capped loss} for one QK-norm arm, every swept lr (at least 3)."""
    lrs = values(report, "lr")
    if len(lrs) < 3:
        raise NoData(f"learning rates {lrs}: need >= 3")
    out = {}
    for lr in lrs:
        row = variant(report, lr=lr, **{QK: qk})
        out[lr] = {r["seed"]: x for r in finished(row) if (x := capped_loss(r)) is not None}
        if len(out[lr]) < MIN_SEEDS:
            raise too_few(row, len(out[lr]), "finished runs with a logged loss")
    return out


def sensitivity(curve: dict[float, float]) -> float:
    """Mean over learning rates of the loss above the best learning rate's."""
    best = min(curve.values())
    return statistics.fmean(x - best for x in curve.values())


def lr_curve(losses: dict[float, dict[Any, float]]) -> dict[float, float]:
    return {lr: statistics.fmean(by_seed.values()) for lr, by_seed in losses.items()}


def f6_logit_grows(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    low, top = (peak_logit(variant(report, lr=lr, **{QK: False})) for lr in (lrs[0], lrs[-1]))
    v.threshold = f"max logit at lr {lrs[-1]:g} / at lr {lrs[0]:g} >= {LOGIT_GROWTH:g}"
    return decide(v, top >= LOGIT_GROWTH * low, lowest_lr=low, top_lr=top, growth=top / low)


def f6_qk_bounded(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    low, top = (peak_logit(variant(report, lr=lr, **{QK: True})) for lr in (lrs[0], lrs[-1]))
    plain = peak_logit(variant(report, lr=lrs[-1], **{QK: False}))
    v.threshold = (
        f"qk growth over the lrs < {LOGIT_GROWTH:g}, no-qk / qk >= {LOGIT_GROWTH:g} at the top lr"
    )
    ok = top < LOGIT_GROWTH * low and plain >= LOGIT_GROWTH * top
    return decide(v, ok, qk_lowest_lr=low, qk_top_lr=top, growth=top / low, no_qk_top_lr=plain)


def f6_qk_ends_better(report: dict, settings: dict, v: Verdict) -> Verdict:
    plain, qk = lr_curve(lr_losses(report, False)), lr_curve(lr_losses(report, True))
    top = sorted(plain)[-TOP_LRS:]
    gap = statistics.fmean(plain[lr] - qk[lr] for lr in top)
    v.threshold = f"mean over lr {', '.join(f'{x:g}' for x in top)} of no-qk - qk >= {WORSE}"
    per_lr = {f"{lr:g}": f"{plain[lr]:.3f} vs {qk[lr]:.3f}" for lr in top}
    return decide(v, gap >= WORSE, gap=gap, no_qk_vs_qk=per_lr)


def f6_qk_lowers_sensitivity(report: dict, settings: dict, v: Verdict) -> Verdict:
    measured: dict[str, Any] = {}
    sens = {}
    for qk, arm in ((False, "no_qk"), (True, "qk")):
        losses = lr_losses(report, qk)
        curve = lr_curve(losses)
        sens[arm] = sensitivity(curve)
        measured[arm] = sens[arm]
        measured[f"{arm}_loss_per_lr"] = {f"{lr:g}": round(x, 3) for lr, x in curve.items()}
        seeds = set.intersection(*(set(by_seed) for by_seed in losses.values()))
        per_seed = [sensitivity({lr: by[s] for lr, by in losses.items()}) for s in sorted(seeds)]
        if len(per_seed) > 1:
            measured[f"{arm}_per_seed"] = (
                f"{statistics.fmean(per_seed):.3f} ± {statistics.stdev(per_seed):.3f}"
            )
    v.threshold = f"sensitivity(no qk) - sensitivity(qk) >= {SENS_GAP}"
    gap = sens["no_qk"] - sens["qk"]
    return decide(v, gap >= SENS_GAP, **measured, gap=gap)
