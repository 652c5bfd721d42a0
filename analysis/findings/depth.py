"""Warmup and depth (F2, F3, F4, the ViT and the placement study): which placements need warmup,
which train deep, and how large the early model update is.

Margins (FAILS, DEEP_OK, F4_TOL, UPDATE_RATIO, WORSE, CLOSE): each claim's registry entry, their
values and reasons in analysis/findings/claims.py.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from analysis import stats
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
    scores,
    too_few,
    values,
    variant,
)
from analysis.findings.settings import ReproduceConfig
from analysis.runs import run_series, run_summary
from runs import metric_names as names

EARLY_FRACTION = 0.05  # "early": the first 5% of training


# --- F2: warmup ----------------------------------------------------------------------------------
def warmup_pair(
    report: dict, reproduce: ReproduceConfig, placement: str
) -> tuple[dict, dict, dict]:
    lr = reproduce.ref_lr
    if lr is None:
        raise NoData("the experiment sets no reproduce.ref_lr")
    warmups = values(report, "warmup_steps")
    if 0 not in warmups or len(warmups) < 2:
        raise NoData(f"warmup_steps values {warmups}: need 0 and a warmup")
    off = variant(report, placement=placement, lr=lr, warmup_steps=0)
    on = variant(report, placement=placement, lr=lr, warmup_steps=warmups[-1])
    return off, on, {"lr": lr, "warmup_steps": warmups[-1]}


def f2_post_needs_warmup(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    off, on, where = warmup_pair(report, reproduce, "post")
    v.threshold = f"no-warmup - warmup >= {m.worse} (95% interval)"
    return decide_interval(
        v, "gap", diff(off, on), m.worse, "above",
        post_no_warmup=mean_score(off), post_warmup=mean_score(on), **where,
    )  # fmt: skip


def f2_pre_no_warmup(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    off, on, where = warmup_pair(report, reproduce, "pre")
    v.threshold = f"no-warmup - warmup <= {m.close} (95% interval)"
    return decide_interval(
        v, "gap", diff(off, on), m.close, "below",
        pre_no_warmup=mean_score(off), pre_warmup=mean_score(on), **where,
    )  # fmt: skip


# --- F3/F4 and the ViT: depth --------------------------------------------------------------------
def depth_means(report: dict, placement: str, depth: int) -> float:
    return mean_score(variant(report, placement=placement, n_layer=depth))


def deep_post_fails(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    depth = max(values(report, "n_layer"), default=None)
    if depth is None:
        raise NoData("no depths in the report")
    post = depth_means(report, "post", depth)
    others = {p: depth_means(report, p, depth) for p in ("pre", "deepnorm")}
    best = min(others, key=others.get)
    v.threshold = (
        f"post diverged, or post - the better of pre, deepnorm >= {m.fails} (95% interval)"
    )
    ci = diff(variant(report, placement="post", n_layer=depth), variant(report, placement=best,
              n_layer=depth))  # fmt: skip
    return decide_interval(v, f"post - {best}", ci, m.fails, "above", depth=depth, post=post,
                           **others)  # fmt: skip


def deep_others_train(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    depths = values(report, "n_layer")
    if len(depths) < 2:
        raise NoData(f"depths {depths}: need >= 2")
    measured, parts = {"depths": [depths[0], depths[-1]]}, {}
    for p in ("pre", "deepnorm"):
        rows = [variant(report, placement=p, n_layer=d) for d in (depths[0], depths[-1])]
        measured[f"{p}_shallowest"], measured[f"{p}_deepest"] = map(mean_score, rows)
        parts[f"{p} deepest - shallowest"] = (diff(rows[1], rows[0]), m.deep_ok, "below")
    v.threshold = f"no divergence and deepest - shallowest <= {m.deep_ok}, for each (95% interval)"
    measure(v, **measured)
    return decide_all(v, parts)


def shallow_post_matches(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    m = v.margins
    depth = min(values(report, "n_layer"), default=None)
    if depth is None:
        raise NoData("no depths in the report")
    warmups = values(report, "warmup_steps")
    if not warmups or warmups[0] <= 0:
        raise NoData("F4 needs runs with warmup")
    rows = [variant(report, placement=p, n_layer=depth) for p in ("post", "pre")]
    post, pre = map(mean_score, rows)
    v.threshold = f"post - pre <= {m.f4_tol} (95% interval)"
    return decide_interval(v, "post - pre", diff(*rows), m.f4_tol, "below", depth=depth,
                           post=post, pre=pre)  # fmt: skip


def early_update(row: dict, max_steps: int) -> list[float]:
    """Each finished run's mean update/model over the logged steps 0 < s <= EARLY_FRACTION *
    max_steps (step 0 is the reference itself), one value a seed."""
    means = []
    for run in finished_runs(row):
        series = run_series(run["run_dir"], names.UPDATE)
        early = [y for s, y in series if 0 < s <= EARLY_FRACTION * max_steps]
        if early:
            means.append(statistics.fmean(early))
    if len(means) < MIN_SEEDS:
        raise too_few(row, len(means), "finished runs with update/model logged early")
    return means


def post_update_jumps(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
    """At one fixed rate (the experiment's optim.lr), as DeepNet compares the updates."""
    m = v.margins
    depth = max(values(report, "n_layer"), default=None)
    max_steps = reproduce.max_steps
    if depth is None or not max_steps:
        raise NoData("no depths or max_steps")
    at = {"lr": reproduce.lr} if len(values(report, "lr")) > 1 and reproduce.lr is not None else {}
    at.update(reproduce.update_arm)  # an arm of its own (the ViT's, with warmup)
    post = early_update(variant(report, placement="post", n_layer=depth, **at), max_steps)
    deep = early_update(variant(report, placement="deepnorm", n_layer=depth, **at), max_steps)
    v.threshold = (
        f"post / deepnorm >= {m.update_ratio} (mean over the first {EARLY_FRACTION:.0%} of steps; "
        "95% interval)"
    )
    ci = stats.ratio_interval(post, deep)
    shown = {"depth": depth, "post": statistics.fmean(post), "deepnorm": statistics.fmean(deep)}
    return decide_interval(v, "post / deepnorm", ci, m.update_ratio, "above", **shown, **at)


# --- Placements at depth -------------------------------------------------------------------------
def unigram_loss(row: dict) -> float:
    """The unigram loss of the row's data (each text run records it in summary.json)."""
    found = [
        x
        for r in row["runs"]
        if isinstance(x := (run_summary(Path(r["run_dir"])) or {}).get("unigram_loss"), float)
    ]
    if not found:
        raise NoData(f"{row['label']}: no run recorded its data's unigram_loss")
    return statistics.fmean(found)


def trains_deep(placement: str) -> Check:
    """Claim check: ``placement`` trains at the deepest depth (F3's DEEP_OK rule; with one
    depth: ends DEEP_OK below the unigram loss)."""

    def check(report: dict, reproduce: ReproduceConfig, v: Verdict) -> Verdict:
        m = v.margins
        depths = values(report, "n_layer")
        if len(depths) == 1:
            row = variant(report, placement=placement, n_layer=depths[0])
            loss, plateau = mean_score(row), unigram_loss(row)
            v.threshold = f"no divergence and unigram loss - loss >= {m.deep_ok} (95% interval)"
            ci = stats.mean_interval([plateau - x for x in scores(row)])
            return decide_interval(
                v, "unigram - loss", ci, m.deep_ok, "above", depth=depths[0], loss=loss,
                unigram=plateau,
            )  # fmt: skip
        if len(depths) < 2:
            raise NoData(f"depths {depths}: need >= 1")
        rows = [variant(report, placement=placement, n_layer=d) for d in (depths[0], depths[-1])]
        shallow, deep = map(mean_score, rows)
        v.threshold = f"no divergence and deepest - shallowest <= {m.deep_ok} (95% interval)"
        return decide_interval(
            v, "deepest - shallowest", diff(rows[1], rows[0]), m.deep_ok, "below",
            depths=[depths[0], depths[-1]], shallowest=shallow, deepest=deep,
        )  # fmt: skip

    return check
