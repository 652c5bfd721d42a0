"""F6 (Wortsman et al. 2023): attention logit growth at high learning rates, QK-norm, and the
learning-rate sensitivity; F13: their Figure 1, the final loss against the learning rate with
and without qk-layernorm and z-loss, from the same sweep (QK-norm x z-loss x lr x seed). F6's
claims read the arms without z-loss.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from analysis import stats
from analysis.findings.common import (
    MIN_SEEDS,
    Check,
    NoData,
    Verdict,
    decide_all,
    decide_interval,
    finished_runs,
    measure,
    too_few,
    untestable,
    values,
    variant,
)
from analysis.findings.settings import ReproduceConfig
from analysis.findings.stability import no_divergence
from analysis.lr_sweep import capped, sensitivity
from analysis.runs import run_series
from runs import metric_names as names

# --- F6: attention logit growth and LR sensitivity (Wortsman et al. 2023) ------------------------
# LR sensitivity, as Wortsman et al. define it: E_lr[min(l(lr), l0) - l*] over the swept learning
# rates, with l(lr) the final loss, l0 the loss at initialization and l* = min_lr l(lr); a run that
# diverged (or ends above l0) counts at l0. Defined once, in analysis/lr_sweep.py (capped,
# sensitivity), which the report's column uses too; l0 is the arm's mean first train loss.
# Margins (LOGIT_GROWTH, SENS_GAP, SPAN, WORSE, CLOSE): each claim's registry entry, their values
# and reasons in analysis/findings/claims.py.
TOP_LRS = 2  # "at the highest learning rates": the two largest swept values
WORTSMAN = "Wortsman et al. 2023"
QK, Z = "model.qk_norm", "optim.z_loss"


def arm(report: dict, qk: bool, z: float = 0.0) -> dict[str, Any]:
    """The params of one intervention arm; z-loss only where the sweep varies it."""
    return {QK: qk, Z: z} if values(report, Z) else {QK: qk}


def peaks(row: dict) -> list[float]:
    """Each finished run's largest logged attn/max_logit, one value a seed."""
    found = [
        max(y for _, y in s)
        for r in finished_runs(row)
        if (s := run_series(r["run_dir"], names.MAX_LOGIT))
    ]
    if len(found) < MIN_SEEDS:
        raise too_few(row, len(found), "finished runs with attn/max_logit logged")
    return found


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
        for r in finished_runs(row)
        if (s := run_series(r["run_dir"], "train/loss"))
    }
    if not firsts:
        raise NoData("no run of the arm logged a train loss")
    l0 = statistics.fmean(firsts.values())
    out = {}
    for lr, row in rows.items():
        out[lr] = {
            r["seed"]: capped(final_loss(r), l0) for r in finished_runs(row) if id(r) in firsts
        }
        if len(out[lr]) < MIN_SEEDS:
            raise too_few(row, len(out[lr]), "finished runs with a logged loss")
    return out


def seed_mean_curve(losses: dict[float, dict[Any, float]]) -> dict[float, float]:
    """The loss at each lr, averaged over its seeds (each capped as analysis/lr_sweep.capped)."""
    return {lr: statistics.fmean(by_seed.values()) for lr, by_seed in losses.items()}


def seed_curves(losses: dict[float, dict[Any, float]]) -> list[dict[float, float]]:
    """One loss-vs-lr curve per seed that ran at every lr."""
    seeds = set.intersection(*(set(by_seed) for by_seed in losses.values()))
    if len(seeds) < MIN_SEEDS:
        raise NoData(f"{len(seeds)} seeds ran at every lr, need >= {MIN_SEEDS}")
    return [{lr: by_seed[s] for lr, by_seed in losses.items()} for s in sorted(seeds, key=str)]


def per_decade(growth: stats.Interval, lrs: list[float]) -> stats.Interval:
    """A growth factor over the swept lrs (an interval on logs) as a factor per decade of lr."""
    k = 1 / math.log10(lrs[-1] / lrs[0])
    return dataclasses.replace(
        growth,
        effect=growth.effect**k,
        lo=growth.lo**k,
        hi=growth.hi**k,
        sd=tuple(x * k for x in growth.sd),
    )


def logit_growth(report: dict, qk: bool) -> tuple[stats.Interval, list[float], list[float]]:
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    low, top = (peaks(variant(report, lr=lr, **arm(report, qk))) for lr in (lrs[0], lrs[-1]))
    return per_decade(stats.ratio_interval(top, low), lrs), low, top


def f6_logit_grows(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    lrs = values(report, "lr")
    rate, low, top = logit_growth(report, False)
    bound = m.logit_growth**0.5  # LOGIT_GROWTH over two decades: its root a decade
    v.threshold = (
        f"max logit growth from lr {lrs[0]:g} to {lrs[-1]:g} >= {bound:.2f}x a decade "
        "(95% interval)"
    )
    shown = {"lowest_lr": statistics.fmean(low), "top_lr": statistics.fmean(top)}
    return decide_interval(v, "growth per decade", rate, bound, "above", **shown)


def f6_qk_bounded(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    lrs = values(report, "lr")
    rate, low, top = logit_growth(report, True)
    plain = peaks(variant(report, lr=lrs[-1], **arm(report, False)))
    growth = m.logit_growth
    v.threshold = (
        f"qk growth < {growth**0.5:.2f}x a decade of lr, no-qk / qk >= {growth:g} at the top lr "
        "(95% intervals)"
    )
    measure(v, qk_lowest_lr=statistics.fmean(low), qk_top_lr=statistics.fmean(top),
            no_qk_top_lr=statistics.fmean(plain))  # fmt: skip
    parts = {
        "qk growth per decade": (rate, growth**0.5, "below"),
        f"no-qk / qk at lr {lrs[-1]:g}": (stats.ratio_interval(plain, top), growth, "above"),
    }
    return decide_all(v, parts)


def f6_qk_ends_better(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    plain, qk = lr_losses(report, False), lr_losses(report, True)
    top = sorted(plain)[-TOP_LRS:]
    arms = [list(by[lr].values()) for lr in top for by in (plain, qk)]
    weights = [w / len(top) for _ in top for w in (1.0, -1.0)]
    v.threshold = (
        f"mean over lr {', '.join(f'{x:g}' for x in top)} of no-qk - qk >= {m.worse} (95% interval)"
    )
    means = seed_mean_curve(plain), seed_mean_curve(qk)
    per_lr = {f"{lr:g}": f"{means[0][lr]:.3f} vs {means[1][lr]:.3f}" for lr in top}
    return decide_interval(v, "no-qk - qk", stats.contrast_interval(arms, weights), m.worse,
                           "above", no_qk_vs_qk=per_lr)  # fmt: skip


def f6_qk_lowers_sensitivity(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    measured: dict[str, Any] = {}
    per_seed = {}
    for qk, name in ((False, "no_qk"), (True, "qk")):
        losses = lr_losses(report, qk)
        curve = seed_mean_curve(losses)
        per_seed[name] = [sensitivity(c) for c in seed_curves(losses)]
        measured[name] = sensitivity(curve)
        measured[f"{name}_loss_per_lr"] = {f"{lr:g}": round(x, 3) for lr, x in curve.items()}
    v.threshold = f"sensitivity(no qk) - sensitivity(qk) >= {m.sens_gap} (95% interval, per seed)"
    ci = stats.diff_interval(per_seed["no_qk"], per_seed["qk"])
    return decide_interval(v, "sensitivity no-qk - qk", ci, m.sens_gap, "above", **measured)


# --- F13: Wortsman et al.'s Figure 1: loss vs lr with qk-layernorm and z-loss ---------------------
def curve_of(losses: dict[float, dict[Any, float]]) -> tuple[dict[float, float], dict[str, Any]]:
    """An arm's loss per lr (its seeds' mean, from lr_losses), and what a verdict shows of it:
    sensitivity, best lr and loss."""
    curve = seed_mean_curve(losses)
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
    (Figure 1: the curves meet at the best lr and part at high rates), each on its 95% interval
    over seeds (one curve a seed). z-loss acts on log Z only: when it lowers nothing and log Z
    did not fall without it at the top rate (F12's rule), the size cannot test it."""

    def check(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
        m = v.margins
        z = z_on(report) if z_arm else 0.0
        base_losses, losses = lr_losses(report, base_qk, 0.0), lr_losses(report, qk, z)
        base, base_shown = curve_of(base_losses)
        with_, shown = curve_of(losses)
        seeds = {"none": seed_curves(base_losses), "with": seed_curves(losses)}
        sens = {k: [sensitivity(c) for c in cs] for k, cs in seeds.items()}
        best = {k: [min(c.values()) for c in cs] for k, cs in seeds.items()}
        v.threshold = (
            f"sensitivity(none) - sensitivity(with) >= {m.sens_gap} and best(with) <= "
            f"best(none) + {m.close} (95% intervals, per seed)"
        )
        measure(v, **{"none": base_shown, "with": shown})
        parts = {
            "sensitivity none - with": (
                stats.diff_interval(sens["none"], sens["with"]),
                m.sens_gap,
                "above",
            ),
            "best with - none": (
                stats.diff_interval(best["with"], best["none"]),
                m.close,
                "below",
            ),
        }
        decide_all(v, parts)
        warmup = reproduce.warmup_steps
        ok = v.status == "PASS"
        why = (
            z_arm
            and not ok
            and no_divergence(report, max(base), warmup, m.drift, **arm(report, base_qk))
        )
        if why:
            reason = f"{why} (F12 gives it 1000 steps; the GPU size, --size gpu, 3k at d=512)"
            return untestable(v, reason)  # the intervals stay: what the size did measure
        return v

    return check


def flat_span(curve: dict[float, float], within: float) -> float:
    """max/min lr of the contiguous lrs around the best whose loss is ``within`` of it."""
    lrs = sorted(curve)
    i = j = lrs.index(min(curve, key=curve.get))
    floor = min(curve.values()) + within
    while i > 0 and curve[lrs[i - 1]] <= floor:
        i -= 1
    while j < len(lrs) - 1 and curve[lrs[j + 1]] <= floor:
        j += 1
    return lrs[j] / lrs[i]


def f13_combined_flat(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    z = z_on(report)
    losses = {"both": lr_losses(report, True, z), "none": lr_losses(report, False, 0.0)}
    (_, shown), (_, base_shown) = curve_of(losses["both"]), curve_of(losses["none"])
    spans = {k: [flat_span(c, m.worse) for c in seed_curves(by_lr)] for k, by_lr in losses.items()}
    v.threshold = (
        f"qk + z-loss: the lrs within {m.worse} of its best span >= {m.span:g}x, and more than "
        "without both (95% intervals over seeds' spans, on logs)"
    )
    measure(v, both=shown, none=base_shown)
    parts = {
        "span with both": (stats.ratio_interval(spans["both"]), m.span, "above"),
        "span both / none": (stats.ratio_interval(spans["both"], spans["none"]), 1.0, "above"),
    }
    return decide_all(v, parts)
