"""The published claims each reproduction checks, decided from a sweep's report.json.

A claim states what a paper reports, measures it in the report (scripts/compare.py's variants:
mean over seeds of each run's best val loss; or its init-probe groups), compares it with a
threshold and says PASS or FAIL, or NO DATA when the variants it needs are missing or have fewer
than MIN_SEEDS finished runs. A diverged (or crashed) run scores +inf: it counts as worse than any
run that trained, and a variant with one such seed is as bad as its worst seed.

Thresholds (losses in nats per token / per image; seed-to-seed std at the CPU sizes is 0.01-0.04):
    WORSE = 0.10   "ends worse": >= 2.5 seed stds, far below the gaps the papers report
    CLOSE = 0.05   "close to" / "matches": about 2 seed stds
    FAILS = 0.20   "fails to train": a gap no seed noise reaches (a stuck Post-LN sits ~0.6 above)
    DEEP_OK = 0.30 "trains at depth": deepest within this of the same placement's shallowest
                   (short runs of deep stacks lag a little without failing)
    F4_TOL = 0.02  "ends slightly better": Post-LN's mean at most this above Pre-LN's
    UPDATE_RATIO = 2.0  Post-LN's model update over the first 5% of steps at least this multiple
                   of DeepNorm's (seeds differ by ~15%; DeepNet reports orders of magnitude)
F1 thresholds are on log-log slopes: flat |slope| < 0.15 (theory 0), shrinking < -0.3 (theory
-0.5); residual norm last/first layer within [1/1.5, 1.5] (flat) or >= 2 (growing).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MIN_SEEDS = 2
WORSE, CLOSE, FAILS, DEEP_OK, F4_TOL, UPDATE_RATIO = 0.10, 0.05, 0.20, 0.30, 0.02, 2.0
FLAT_SLOPE, SHRINK_SLOPE, FLAT_RATIO, GROW_RATIO = 0.15, -0.3, 1.5, 2.0
EARLY_FRACTION = 0.05  # "early": the first 5% of training
STATUSES = ("PASS", "FAIL", "NO DATA")


@dataclass
class Verdict:
    id: str
    statement: str  # the paper's claim, as this sweep tests it
    source: str
    measured: dict[str, Any] = field(default_factory=dict)
    threshold: str = ""
    status: str = "NO DATA"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NoData(Exception):
    """The report lacks what a claim needs; the message says what."""


# --- reading the report --------------------------------------------------------------------------
def close(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return a == b


def variant(report: dict, **params: Any) -> dict:
    """The one variant row whose params match ``params``."""
    rows = [
        r
        for r in report.get("variants", [])
        if all(close(r["params"].get(k), v) for k, v in params.items())
    ]
    if len(rows) != 1:
        what = " ".join(f"{k}={v}" for k, v in params.items())
        raise NoData(f"{len(rows)} variants match {what} (need exactly 1)")
    return rows[0]


def scores(row: dict, metric: str = "best_val_loss") -> list[float]:
    """Per finished run: its metric, +inf when it diverged or failed; unfinished runs skipped."""
    out = []
    for run in row["runs"]:
        value = run.get(metric)
        if run["status"] == "completed" and isinstance(value, int | float):
            out.append(float(value))
        elif run["status"] in ("completed", "diverged", "failed"):
            out.append(math.inf)
    return out


def mean_score(row: dict, min_seeds: int = MIN_SEEDS) -> float:
    values = scores(row)
    if len(values) < min_seeds:
        raise NoData(f"{row['label']}: {len(values)} finished runs, need >= {min_seeds}")
    return math.inf if math.inf in values else statistics.fmean(values)


def values(report: dict, key: str) -> list[Any]:
    """The distinct values of one variant param across the report, sorted."""
    found = {r["params"].get(key) for r in report.get("variants", [])} - {None}
    return sorted(found)


def rnd(x: float | None, digits: int = 4) -> float | str | None:
    if x is None:
        return None
    return "inf (diverged)" if math.isinf(x) else round(x, digits)


def decide(verdict: Verdict, passed: bool, **measured: Any) -> Verdict:
    verdict.measured.update({k: rnd(v) if isinstance(v, float) else v for k, v in measured.items()})
    verdict.status = "PASS" if passed else "FAIL"
    return verdict


# --- F1: init probe ------------------------------------------------------------------------------
def probe_series(report: dict, placement: str) -> list[dict]:
    groups = [g for g in report.get("init_probe", []) if g["params"].get("placement") == placement]
    groups.sort(key=lambda g: g["params"]["n_layer"])
    if len(groups) < 2:
        raise NoData(f"init probe for placement={placement}: {len(groups)} depths, need >= 2")
    return groups


def log_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


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


# --- F2: warmup ----------------------------------------------------------------------------------
def warmup_pair(report: dict, settings: dict, placement: str) -> tuple[float, float, dict]:
    lr = settings.get("ref_lr")
    if lr is None:
        raise NoData("the experiment sets no reproduce.ref_lr")
    warmups = values(report, "warmup_steps")
    if 0 not in warmups or len(warmups) < 2:
        raise NoData(f"warmup_steps values {warmups}: need 0 and a warmup")
    off = mean_score(variant(report, placement=placement, lr=lr, warmup_steps=0))
    on = mean_score(variant(report, placement=placement, lr=lr, warmup_steps=warmups[-1]))
    return off, on, {"lr": lr, "warmup_steps": warmups[-1]}


def f2_post_needs_warmup(report: dict, settings: dict, v: Verdict) -> Verdict:
    off, on, where = warmup_pair(report, settings, "post")
    v.threshold = f"no-warmup - warmup >= {WORSE}"
    return decide(v, off - on >= WORSE, post_no_warmup=off, post_warmup=on, gap=off - on, **where)


def f2_pre_no_warmup(report: dict, settings: dict, v: Verdict) -> Verdict:
    off, on, where = warmup_pair(report, settings, "pre")
    v.threshold = f"no-warmup - warmup <= {CLOSE}"
    return decide(v, off - on <= CLOSE, pre_no_warmup=off, pre_warmup=on, gap=off - on, **where)


# --- F3/F4 and the ViT: depth --------------------------------------------------------------------
def depth_means(report: dict, placement: str, depth: int) -> float:
    return mean_score(variant(report, placement=placement, n_layer=depth))


def deep_post_fails(report: dict, settings: dict, v: Verdict) -> Verdict:
    depth = max(values(report, "n_layer"), default=None)
    if depth is None:
        raise NoData("no depths in the report")
    post = depth_means(report, "post", depth)
    others = {p: depth_means(report, p, depth) for p in ("pre", "deepnorm")}
    best = min(others.values())
    v.threshold = f"post diverged, or post - min(pre, deepnorm) >= {FAILS}"
    return decide(v, post - best >= FAILS, depth=depth, post=post, **others, gap=post - best)


def deep_others_train(report: dict, settings: dict, v: Verdict) -> Verdict:
    depths = values(report, "n_layer")
    if len(depths) < 2:
        raise NoData(f"depths {depths}: need >= 2")
    measured, ok = {"depths": [depths[0], depths[-1]]}, True
    for p in ("pre", "deepnorm"):
        shallow, deep = depth_means(report, p, depths[0]), depth_means(report, p, depths[-1])
        measured[f"{p}_shallowest"], measured[f"{p}_deepest"] = shallow, deep
        ok = ok and deep - shallow <= DEEP_OK
    v.threshold = f"no divergence and deepest - shallowest <= {DEEP_OK}, for each"
    return decide(v, ok, **measured)


def shallow_post_matches(report: dict, settings: dict, v: Verdict) -> Verdict:
    depth = min(values(report, "n_layer"), default=None)
    if depth is None:
        raise NoData("no depths in the report")
    warmups = values(report, "warmup_steps")
    if not warmups or warmups[0] <= 0:
        raise NoData("F4 needs runs with warmup")
    post, pre = depth_means(report, "post", depth), depth_means(report, "pre", depth)
    v.threshold = f"post <= pre + {F4_TOL}"
    return decide(v, post <= pre + F4_TOL, depth=depth, post=post, pre=pre, diff=post - pre)


def early_update(row: dict, max_steps: int) -> float:
    """Mean over seeds of each run's mean update/model over the logged steps 0 < s <=
    EARLY_FRACTION * max_steps (step 0 is the reference itself)."""
    from scripts.compare import Warnings, find_metrics_file, read_metrics

    means = []
    for run in row["runs"]:
        series = read_metrics(find_metrics_file(Path(run["run_dir"])), Warnings())
        early = [
            y for s, y in series.get("update/model", []) if 0 < s <= EARLY_FRACTION * max_steps
        ]
        if early:
            means.append(statistics.fmean(early))
    if len(means) < MIN_SEEDS:
        raise NoData(f"{row['label']}: update/model logged early in {len(means)} runs")
    return statistics.fmean(means)


def post_update_jumps(report: dict, settings: dict, v: Verdict) -> Verdict:
    depth = max(values(report, "n_layer"), default=None)
    max_steps = settings.get("max_steps")
    if depth is None or not max_steps:
        raise NoData("no depths or max_steps")
    post = early_update(variant(report, placement="post", n_layer=depth), max_steps)
    deep = early_update(variant(report, placement="deepnorm", n_layer=depth), max_steps)
    v.threshold = (
        f"post / deepnorm >= {UPDATE_RATIO} (mean over the first {EARLY_FRACTION:.0%} of steps)"
    )
    ratio = post / deep if deep > 0 else math.inf
    return decide(v, ratio >= UPDATE_RATIO, depth=depth, post=post, deepnorm=deep, ratio=ratio)


# --- F5: norms -----------------------------------------------------------------------------------
def rmsnorm_matches(report: dict, settings: dict, v: Verdict) -> Verdict:
    placements = values(report, "placement")
    if not placements:
        raise NoData("no placements in the report")
    measured, ok = {}, True
    for p in placements:
        ln = mean_score(variant(report, placement=p, norm="layernorm"))
        rms = mean_score(variant(report, placement=p, norm="rmsnorm"))
        measured[f"{p}_layernorm"], measured[f"{p}_rmsnorm"] = ln, rms
        measured[f"{p}_diff"] = rms - ln
        ok = ok and abs(rms - ln) <= CLOSE
        tput = [
            variant(report, placement=p, norm=n)["throughput"] for n in ("rmsnorm", "layernorm")
        ]
        if all(tput):
            measured[f"{p}_throughput_ratio"] = round(tput[0]["mean"] / tput[1]["mean"], 3)
    v.threshold = f"|rmsnorm - layernorm| <= {CLOSE} for each placement"
    return decide(v, ok, **measured)


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


def run_series(run: dict, metric: str) -> list[tuple[int, float]]:
    """One metric of one run, read from its metrics.csv."""
    from scripts.compare import Warnings, find_metrics_file, read_metrics

    return read_metrics(find_metrics_file(Path(run["run_dir"])), Warnings()).get(metric, [])


def ended(row: dict) -> list[dict]:
    return [r for r in row["runs"] if r["status"] in ("completed", "diverged", "failed")]


def peak_logit(row: dict) -> float:
    """Mean over seeds of each run's largest logged attn/max_logit."""
    peaks = [max(y for _, y in s) for r in ended(row) if (s := run_series(r, "attn/max_logit"))]
    if len(peaks) < MIN_SEEDS:
        raise NoData(f"{row['label']}: attn/max_logit logged in {len(peaks)} runs")
    return statistics.fmean(peaks)


def capped_loss(run: dict) -> float | None:
    """min(final val loss, initial loss); the initial loss for a run that diverged or failed."""
    start = run_series(run, "train/loss")
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
        out[lr] = {r["seed"]: x for r in ended(row) if (x := capped_loss(r)) is not None}
        if len(out[lr]) < MIN_SEEDS:
            raise NoData(f"{row['label']}: {len(out[lr])} runs with a loss, need >= {MIN_SEEDS}")
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


# --- F7: batch statistics ------------------------------------------------------------------------
# Accuracy in [0, 1]: the mean over seeds of each run's best val accuracy (a diverged or failed run
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
        for r in ended(row)
    ]
    if len(accs) < MIN_SEEDS:
        raise NoData(f"{row['label']}: {len(accs)} finished runs, need >= {MIN_SEEDS}")
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


# --- Placements at depth -------------------------------------------------------------------------
def trains_deep(placement: str) -> Check:
    """Claim check: ``placement`` trains at the deepest depth (F3's DEEP_OK rule)."""

    def check(report: dict, settings: dict, v: Verdict) -> Verdict:
        depths = values(report, "n_layer")
        if len(depths) < 2:
            raise NoData(f"depths {depths}: need >= 2")
        shallow = depth_means(report, placement, depths[0])
        deep = depth_means(report, placement, depths[-1])
        v.threshold = f"no divergence and deepest - shallowest <= {DEEP_OK}"
        return decide(
            v,
            deep - shallow <= DEEP_OK,
            depths=[depths[0], depths[-1]],
            shallowest=shallow,
            deepest=deep,
            gap=deep - shallow,
        )

    return check


# --- registry ------------------------------------------------------------------------------------
Check = Callable[[dict, dict, Verdict], Verdict]
XIONG, LIU, WANG = "Xiong et al. 2020", "Liu et al. 2020", "Wang et al. 2022"


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    check: Check


@dataclass(frozen=True)
class Finding:
    experiment: str  # conf/experiment/<experiment>.yaml; the GPU size is <experiment>_gpu
    title: str
    claims: tuple[Claim, ...]
    kind: str = "train"  # the mode its runs use: train | init_probe
    plots: tuple[str, ...] = ("loss_curves.png",)  # the report's key figures (for --publish)


DEPTH_CLAIMS = (
    Claim("deep-post-fails", "Post-LN fails at the deepest depth", LIU, deep_post_fails),
    Claim("deep-others-train", "Pre-LN and DeepNorm train at every depth", WANG, deep_others_train),
    Claim(
        "update-jumps",
        "Post-LN's model update is larger early than DeepNorm's",
        WANG,
        post_update_jumps,
    ),
)
FINDINGS: dict[str, Finding] = {
    "f1": Finding(
        "f1_init",
        "F1: gradients and residual norms at initialization vs depth",
        (
            Claim(
                "F1a", "Post-LN last-layer FFN grad norm is flat in depth", XIONG, f1_post_grad_flat
            ),
            Claim(
                "F1b",
                "Pre-LN last-layer FFN grad norm shrinks with depth",
                XIONG,
                f1_pre_grad_shrinks,
            ),
            Claim(
                "F1c", "Post-LN residual norm is flat across layers", XIONG, f1_post_residual_flat
            ),
            Claim("F1d", "Pre-LN residual norm grows across layers", XIONG, f1_pre_residual_grows),
        ),
        kind="init_probe",
        plots=("grad_norm_init.png", "act_norm_init.png"),
    ),
    "f2": Finding(
        "f2_warmup",
        "F2: Post-LN needs learning-rate warmup, Pre-LN does not",
        (
            Claim(
                "F2a", "Post-LN without warmup ends worse than with it", XIONG, f2_post_needs_warmup
            ),
            Claim("F2b", "Pre-LN without warmup ends as well as with it", XIONG, f2_pre_no_warmup),
        ),
    ),
    "f3": Finding(
        "f3_depth",
        "F3: depth stability of Post-LN, Pre-LN and DeepNorm; F4: shallow Post-LN ends better",
        (
            *(
                Claim(f"F3{c}", x.statement, x.source, x.check)
                for c, x in zip("abc", DEPTH_CLAIMS, strict=True)
            ),
            Claim(
                "F4",
                "Shallow Post-LN with warmup ends at least as well as Pre-LN",
                LIU,
                shallow_post_matches,
            ),
        ),
        plots=("best_val_vs_depth.png", "model_update.png"),
    ),
    "f5": Finding(
        "f5_norms",
        "F5: RMSNorm matches LayerNorm",
        (
            Claim(
                "F5",
                "RMSNorm's best val loss matches LayerNorm's",
                "Zhang & Sennrich 2019",
                rmsnorm_matches,
            ),
        ),
    ),
    "vit": Finding(
        "vit_depth",
        "ViT on digits: depth stability without warmup at a high learning rate",
        tuple(
            Claim(f"V{i}", x.statement, x.source, x.check) for i, x in enumerate(DEPTH_CLAIMS, 1)
        ),
        plots=("best_val_vs_depth.png", "model_update.png"),
    ),
    "f6": Finding(
        "f6_lr_sensitivity",
        "F6: attention logits at high learning rates, QK-norm and LR sensitivity",
        (
            Claim(
                "F6a",
                "Without QK-norm the max attention logit grows with the learning rate",
                WORTSMAN,
                f6_logit_grows,
            ),
            Claim(
                "F6b", "With QK-norm the max attention logit stays bounded", WORTSMAN, f6_qk_bounded
            ),
            Claim(
                "F6c",
                "At the highest learning rates QK-norm ends with a lower loss",
                WORTSMAN,
                f6_qk_ends_better,
            ),
            Claim("F6d", "QK-norm lowers the LR sensitivity", WORTSMAN, f6_qk_lowers_sensitivity),
        ),
    ),
    "f7": Finding(
        "f7_batch_stats",
        "F7: BatchNorm depends on the batch size; LayerNorm and RMSNorm do not",
        (
            Claim(
                "F7a",
                "BatchNorm's accuracy drops at a small batch more than LayerNorm's and RMSNorm's",
                "Ioffe & Szegedy 2015; Wu & He 2018",
                f7_batchnorm_degrades,
            ),
            Claim(
                "F7b",
                "LayerNorm's and RMSNorm's accuracy do not depend on the batch size",
                "Ba et al. 2016; Zhang & Sennrich 2019",
                f7_token_norms_flat,
            ),
        ),
    ),
    "placements": Finding(
        "placements_depth",
        "Placements at depth without warmup: which train deep",
        (
            Claim("P1", "Post-LN fails at the deepest depth", LIU, deep_post_fails),
            Claim("P2", "Pre-LN trains at the deepest depth", XIONG, trains_deep("pre")),
            Claim("P3", "DeepNorm trains at the deepest depth", WANG, trains_deep("deepnorm")),
            Claim(
                "P4",
                "Sandwich-LN trains at the deepest depth",
                "Ding et al. 2021; Kim et al. 2025",
                trains_deep("sandwich"),
            ),
        ),
        plots=("best_val_vs_depth.png",),
    ),
}
ALIASES = {"f4": "f3"}  # F4 is the shallow arm of the depth sweep


def evaluate(finding: str, report: dict, settings: dict | None = None) -> list[Verdict]:
    """Every claim of ``finding`` decided on ``report``; ``settings``: the experiment's
    ``reproduce`` node plus ``max_steps``."""
    settings = settings or {}
    out = []
    for claim in FINDINGS[ALIASES.get(finding, finding)].claims:
        v = Verdict(claim.id, claim.statement, claim.source)
        try:
            v = claim.check(report, settings, v)
        except NoData as err:
            v.status, v.note = "NO DATA", str(err)
        out.append(v)
    return out
