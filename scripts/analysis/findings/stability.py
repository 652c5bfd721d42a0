"""F8, F10, F12: what the stability probes of 2023-2025 show (training/probes/).

F8 (Kim et al. 2025, Peri-LN; Sun et al. 2024): the residual stream per layer, act_norm (RMS) and
act_max (largest |value|), at the first probe (step 0) and the last one, Pre-LN vs sandwich.
F10 (Zhai et al. 2023): attention entropy per run = the minimum over layers and logged steps of
attn/entropy_min (the lowest head's mean row entropy), with and without QK-norm, over F6's
learning rates. F12 (Wortsman et al. 2023): |log Z| at the last logged step (logits/log_z, the
mean log partition function on the probe batch), with and without z-loss.

Every measure is the mean over a variant's finished runs (a diverged run counts with what it
logged before it stopped). Thresholds, fixed before the sweeps ran:
    GROWS = 2.0     "grows" / "far above": a factor of 2 (the residual stream of a 12-layer Pre-LN
                    model at init already spans ~4x from the first to the last layer)
    COLLAPSE = 0.5  "collapses": the minimum entropy falls to half of its value at the lowest
                    learning rate or less; "prevents": QK-norm's stays above 2x the collapsed one
    SMALL = 0.5     "keeps |log Z| small": half of the value without z-loss or less
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from scripts.analysis.findings.common import (
    CLOSE,
    MIN_SEEDS,
    WORSE,
    NoData,
    Verdict,
    decide,
    finished,
    mean_score,
    too_few,
    values,
    variant,
)
from scripts.analysis.runs import Series, run_series

GROWS, COLLAPSE, SMALL = 2.0, 0.5, 0.5
KIM, ZHAI = "Kim et al. 2025; Sun et al. 2024", "Zhai et al. 2023"
QK, Z = "model.qk_norm", "optim.z_loss"
RunMeasure = Callable[[dict, int], float | None]  # (report run record, n_layer) -> value


def per_run(row: dict, measure: RunMeasure, what: str) -> float:
    """Mean over the variant's finished runs of ``measure`` (runs without it left out)."""
    found = [
        x for r in finished(row) if (x := measure(r, int(row["params"]["n_layer"]))) is not None
    ]
    if len(found) < MIN_SEEDS:
        raise too_few(row, len(found), f"finished runs with {what} logged")
    return statistics.fmean(found)


def layer_series(run: dict, prefix: str, n_layer: int) -> list[Series]:
    return [run_series(run["run_dir"], f"{prefix}/layer_{i}") for i in range(n_layer)]


def at(series: list[Series], index: int) -> list[float] | None:
    """Every layer's value at its first (index 0) or last (-1) logged step; None if one lacks it."""
    return [s[index][1] for s in series] if all(series) else None


# --- F8: the residual stream of Pre-LN and Peri-LN ------------------------------------------------
def depth_ratio(run: dict, n_layer: int) -> float | None:
    """act_norm of the last layer / of the first, at the last probe."""
    end = at(layer_series(run, "act_norm", n_layer), -1)
    return end[-1] / end[0] if end else None


def last_rms(index: int) -> RunMeasure:
    def measure(run: dict, n_layer: int) -> float | None:
        values_ = at(layer_series(run, "act_norm", n_layer), index)
        return values_[-1] if values_ else None

    return measure


def top_max(index: int) -> RunMeasure:
    def measure(run: dict, n_layer: int) -> float | None:
        values_ = at(layer_series(run, "act_max", n_layer), index)
        return max(values_) if values_ else None

    return measure


def f8_pre_grows_with_depth(report: dict, settings: dict, v: Verdict) -> Verdict:
    ratio = per_run(variant(report, placement="pre"), depth_ratio, "act_norm per layer")
    v.threshold = f"Pre-LN act_norm last layer / first layer at the end >= {GROWS:g}"
    return decide(v, ratio >= GROWS, pre_last_over_first=ratio)


def f8_pre_grows_in_training(report: dict, settings: dict, v: Verdict) -> Verdict:
    row = variant(report, placement="pre")
    rms0, rms1 = (per_run(row, last_rms(i), "act_norm") for i in (0, -1))
    max0, max1 = (per_run(row, top_max(i), "act_max") for i in (0, -1))
    v.threshold = f"Pre-LN end / step 0 >= {GROWS:g} for last-layer act_norm and for max act_max"
    ok = rms1 >= GROWS * rms0 and max1 >= GROWS * max0
    return decide(
        v,
        ok,
        rms_start=rms0,
        rms_end=rms1,
        rms_growth=rms1 / rms0,
        max_start=max0,
        max_end=max1,
        max_growth=max1 / max0,
    )


def f8_peri_bounded(report: dict, settings: dict, v: Verdict) -> Verdict:
    pre, peri = variant(report, placement="pre"), variant(report, placement="sandwich")
    rms = {k: per_run(r, last_rms(-1), "act_norm") for k, r in (("pre", pre), ("peri", peri))}
    top = {k: per_run(r, top_max(-1), "act_max") for k, r in (("pre", pre), ("peri", peri))}
    v.threshold = (
        f"at the end Pre-LN / sandwich >= {GROWS:g} for last-layer act_norm and max act_max"
    )
    ok = rms["pre"] >= GROWS * rms["peri"] and top["pre"] >= GROWS * top["peri"]
    return decide(
        v,
        ok,
        rms_pre=rms["pre"],
        rms_peri=rms["peri"],
        rms_ratio=rms["pre"] / rms["peri"],
        max_pre=top["pre"],
        max_peri=top["peri"],
        max_ratio=top["pre"] / top["peri"],
    )


# --- F10: attention entropy at high learning rates, with and without QK-norm ----------------------
def min_entropy(run: dict, n_layer: int) -> float | None:
    """The lowest attn/entropy_min over layers and logged steps."""
    series = layer_series(run, "attn/entropy_min", n_layer)
    points = [y for s in series for _, y in s]
    return min(points) if points else None


def entropy_by_lr(report: dict, qk: bool) -> dict[float, float]:
    lrs = values(report, "lr")
    if len(lrs) < 2:
        raise NoData(f"learning rates {lrs}: need >= 2")
    rows = {lr: variant(report, lr=lr, **{QK: qk}) for lr in lrs}
    return {lr: per_run(row, min_entropy, "attn/entropy_min") for lr, row in rows.items()}


def f10_entropy_collapses(report: dict, settings: dict, v: Verdict) -> Verdict:
    plain = entropy_by_lr(report, False)
    low, top = min(plain), max(plain)
    v.threshold = f"no-qk min entropy at lr {top:g} <= {COLLAPSE:g} x at lr {low:g}"
    per_lr = {f"{lr:g}": round(x, 4) for lr, x in plain.items()}
    ok = plain[top] <= COLLAPSE * plain[low]
    return decide(v, ok, lowest_lr=plain[low], top_lr=plain[top], no_qk_per_lr=per_lr)


def f10_qk_prevents(report: dict, settings: dict, v: Verdict) -> Verdict:
    plain, qk = entropy_by_lr(report, False), entropy_by_lr(report, True)
    low, top = min(qk), max(qk)
    v.threshold = (
        f"at lr {top:g}: qk >= {1 / COLLAPSE:g} x no-qk, and qk >= {COLLAPSE:g} x its own at lr "
        f"{low:g}"
    )
    ok = qk[top] >= plain[top] / COLLAPSE and qk[top] >= COLLAPSE * qk[low]
    per_lr = {f"{lr:g}": round(x, 4) for lr, x in qk.items()}
    return decide(v, ok, qk_top_lr=qk[top], no_qk_top_lr=plain[top], qk_per_lr=per_lr)


def f10_collapse_is_instability(report: dict, settings: dict, v: Verdict) -> Verdict:
    plain = entropy_by_lr(report, False)
    low = min(plain)
    collapsed = [lr for lr in plain if plain[lr] <= COLLAPSE * plain[low]]
    if not collapsed:
        raise NoData("no learning rate collapsed the entropy without QK-norm (see F10a)")
    gaps = {}
    for lr in collapsed:
        loss_plain = mean_score(variant(report, lr=lr, **{QK: False}))
        loss_qk = mean_score(variant(report, lr=lr, **{QK: True}))
        gaps[lr] = loss_plain - loss_qk
    gap = statistics.fmean(gaps.values())
    v.threshold = f"at the collapsed lrs, mean best val loss no-qk - qk >= {WORSE}"
    per_lr = {f"{lr:g}": round(g, 4) for lr, g in gaps.items()}
    return decide(
        v, gap >= WORSE, collapsed_lrs=[f"{x:g}" for x in collapsed], gap=gap, per_lr=per_lr
    )


# --- F12: log Z with and without z-loss -----------------------------------------------------------
def final_abs_log_z(run: dict, n_layer: int) -> float | None:
    series = run_series(run["run_dir"], "logits/log_z")
    return abs(series[-1][1]) if series else None


def log_z_of(report: dict, lr: float, z: float) -> float:
    return per_run(variant(report, lr=lr, **{Z: z}), final_abs_log_z, "logits/log_z")


def z_arms(report: dict) -> tuple[list[float], float, float]:
    lrs, zs = values(report, "lr"), values(report, Z)
    if len(lrs) < 2 or len(zs) < 2 or min(zs) != 0:
        raise NoData(f"learning rates {lrs}, z-losses {zs}: need >= 2 of each, one of them 0")
    return lrs, 0.0, max(zs)


def f12_log_z_drifts(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs, off, _ = z_arms(report)
    default, top = log_z_of(report, lrs[0], off), log_z_of(report, lrs[-1], off)
    v.threshold = f"no z-loss: final |log Z| at lr {lrs[-1]:g} >= {GROWS:g} x at lr {lrs[0]:g}"
    return decide(v, top >= GROWS * default, default_lr=default, top_lr=top)


def f12_z_loss_keeps_small(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs, off, on = z_arms(report)
    plain, z = log_z_of(report, lrs[-1], off), log_z_of(report, lrs[-1], on)
    v.threshold = f"at lr {lrs[-1]:g}: final |log Z| with z-loss {on:g} <= {SMALL:g} x without"
    return decide(v, z <= SMALL * plain, with_z=z, without_z=plain)


def f12_z_loss_costs_nothing(report: dict, settings: dict, v: Verdict) -> Verdict:
    lrs, off, on = z_arms(report)
    plain = mean_score(variant(report, lr=lrs[0], **{Z: off}))
    z = mean_score(variant(report, lr=lrs[0], **{Z: on}))
    v.threshold = f"at lr {lrs[0]:g}: best val loss with z-loss <= without + {CLOSE}"
    return decide(v, z <= plain + CLOSE, with_z=z, without_z=plain, gap=z - plain)
