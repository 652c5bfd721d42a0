"""The stability card: per run, the few numbers a researcher looks at first, read from its
summary.json and metrics.csv (a number whose probe did not run is left out, not guessed):

    outcome        completed / diverged (and why a completed run did not train)
    best val       the lowest validation loss
    story          what happened, in step order: the first step each instrument crossed its
                   threshold (CROSSINGS), each guard's actions, the divergence and its reason
    loss spikes    train losses above the spike factor x their running median (loss_spikes)
    6-sigma steps  spike_score's steps above probes.spike_sigma, loss / gradient norm
    max grad norm  the largest grad_norm/total
    max attn logit the largest attn/max_logit
    min entropy    the lowest head's mean attention entropy, any layer, any step
    max |h|        the largest act_max/layer_i: the residual stream's largest value
    massive        the largest act_massive/layer_i (max |h| / median |h|)
    kurtosis       the largest act_kurtosis/layer_i (outlier features)
    fp16 headroom  the least headroom/fp16 (doublings left before an fp16 overflow)
    max update     the largest update_ratio/max (||dW|| / ||W|| of a block in one step)
    Adam update    the largest adam/update/total
    sinks          attn/sink at the last step it was logged (share of sink heads)

A crossing is placed at the first logged step past its threshold: a probe logged every N steps
(docs/usage.md lists each probe's interval) places it within N steps.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.runs import Run
from runs import metric_names as names

# (column, metric name or pattern, reduction over its steps and matching series)
CARD: list[tuple[str, str, str]] = [
    ("max grad norm", names.GRAD_TOTAL, "max"),
    ("max attn logit", names.MAX_LOGIT, "max"),
    ("min entropy", names.per_layer(names.ATTN_ENTROPY_MIN, "*"), "min"),
    ("max |h|", names.per_layer(names.ACT_MAX, "*"), "max"),
    ("massive", names.per_layer(names.ACT_MASSIVE, "*"), "max"),
    ("kurtosis", names.per_layer(names.ACT_KURTOSIS, "*"), "max"),
    ("fp16 headroom", names.HEADROOM_FP16, "min"),
    ("max update", "update_ratio/max", "max"),
    ("Adam update", f"{names.ADAM_UPDATE}/total", "max"),
    ("sinks", names.ATTN_SINK, "last"),
]


@dataclass(frozen=True)
class Crossing:
    """An instrument's threshold: ``event`` happens at the first step ``pattern``'s value (any
    series it matches: any layer) is ``rule`` ``threshold``: above, below, ``jump`` (above
    ``threshold`` x the median of its earlier values, from the fourth) or ``rises`` (a count
    above its previous value)."""

    event: str
    pattern: str
    rule: str
    threshold: float
    source: str


CROSSINGS: tuple[Crossing, ...] = (
    Crossing("attn logit > 100", names.per_layer(names.MAX_LOGIT, "*"), "above", 100,
             "QK-clip's tau (Kimi K2, 2025): logits past it are clipped there"),
    Crossing("head entropy < 0.1", names.per_layer(names.ATTN_ENTROPY_MIN, "*"), "below", 0.1,
             "entropy collapse (Zhai et al. 2023): one key holding ~99% of a row leaves ~0.08"),
    Crossing("|h| > 100", names.per_layer(names.ACT_MAX, "*"), "above", 100,
             "massive activations' magnitude (Sun et al. 2024)"),
    Crossing("max/median |h| > 1000", names.per_layer(names.ACT_MASSIVE, "*"), "above", 1000,
             "massive activations' ratio to the median (Sun et al. 2024)"),
    Crossing("6-sigma loss", names.SPIKE_LOSS_Z, "above", 6,
             "OLMo-core's spike score (probes.spike_sigma)"),
    Crossing("6-sigma grad norm", names.SPIKE_GRAD_Z, "above", 6,
             "OLMo-core's spike score (probes.spike_sigma)"),
    Crossing("grad norm x10", names.GRAD_TOTAL, "jump", 10,
             "normlab: 10x the median of its earlier values"),
    Crossing("model update x10", names.UPDATE, "jump", 10,
             "normlab: 10x the median of its earlier values (DeepNet's update, Wang et al. 2022)"),
    Crossing("update ratio x10", "update_ratio/max", "jump", 10,
             "normlab: 10x the median of its earlier values"),
    Crossing("fp16 overflow", names.HEADROOM_FP16, "below", 0,
             "no doublings left before fp16's largest value"),
    Crossing("loss spike", "train/loss_spikes", "rises", 0,
             "train loss > probes.spike_factor x its running median"),
)  # fmt: skip
GUARD_EVENTS = {
    names.GUARD_SKIPPED: "skip_step skipped",
    names.GUARD_CLIPPED: "clip_update clipped",
}


def crossed(c: Crossing, value: float, previous: float | None, earlier: list[float]) -> bool:
    """Whether ``value`` is past ``c``'s threshold; ``previous``: the value logged before it,
    ``earlier``: every finite value before it, sorted (a jump's median reads it)."""
    if c.rule == "above":
        return value > c.threshold
    if c.rule == "below":
        return value < c.threshold
    if c.rule == "rises":
        return value > (c.threshold if previous is None else previous)
    n = len(earlier)
    median = earlier[n // 2] if n % 2 else (earlier[n // 2 - 1] + earlier[n // 2]) / 2 if n else 0
    return n >= 3 and value > c.threshold * median


def first_crossing(run: Run, c: Crossing) -> tuple[int, float, int | None] | None:
    """(step, value, layer or None) of the first logged value past ``c``'s threshold, over
    every series its pattern matches (the earliest step; a tie: the lowest layer); None. One
    pass a series: its earlier values kept sorted as it goes."""
    found = []
    for name, series in run.metrics.items():
        if not fnmatch.fnmatchcase(name, c.pattern):
            continue
        layer = int(name.rsplit("_", 1)[1]) if "/layer_" in name else None
        previous, earlier = None, []
        for step, value in series:
            if not math.isfinite(value):
                continue
            if crossed(c, value, previous, earlier):
                found.append((step, -1 if layer is None else layer, value))
                break
            previous = value
            bisect.insort(earlier, value)
    if not found:
        return None
    step, layer, value = min(found)
    return step, value, None if layer < 0 else layer


def guard_steps(run: Run, metric: str) -> list[int]:
    """The steps at which a guard's count (logged when it acts) rose."""
    series, out, last = run.metrics.get(metric, []), [], 0.0
    for step, value in series:
        if value > last:
            out.append(step)
        last = value
    return out


def story(run: Run) -> list[tuple[int | None, str]]:
    """What happened to the run, in step order: each instrument's first crossing, each guard's
    actions, the divergence (or the stall) and its reason; (step, text), step None when only
    its count is known."""
    events: list[tuple[int | None, str]] = []
    for c in CROSSINGS:
        if found := first_crossing(run, c):
            step, value, layer = found
            where = f", layer {layer}" if layer is not None else ""
            events.append((step, f"{c.event} ({value:.3g}{where})"))
    for metric, words in GUARD_EVENTS.items():
        steps = guard_steps(run, metric)
        count = run.summary.get(metric.split("/")[-1])
        if steps:
            shown = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
            events.append((steps[0], f"{words} {len(steps)} step(s) (at {shown})"))
        elif count:
            events.append((None, f"{words} {count} step(s)"))
    at = run.summary.get("diverged_at_step")
    if run.status == "diverged":
        why = run.summary.get("divergence_reason") or "reason not recorded"
        events.append((at if isinstance(at, int) else None, f"diverged: {why}"))
    elif run.did_not_train:
        events.append((run.summary.get("steps"), f"stalled: {run.did_not_train}"))
    events.sort(key=lambda e: (e[0] is None, e[0] or 0))
    return events


def story_text(events: list[tuple[int | None, str]]) -> str:
    return "; ".join(f"step {s}: {t}" if s is not None else t for s, t in events)


def reduce_series(run: Run, pattern: str, how: str) -> float | None:
    series = [s for name, s in run.metrics.items() if fnmatch.fnmatchcase(name, pattern) and s]
    if not series:
        return None
    if how == "last":
        return max((point for s in series for point in s), key=lambda p: p[0])[1]
    values = [v for s in series for _, v in s]
    return max(values) if how == "max" else min(values)


def card(run: Run) -> dict[str, Any]:
    """The run's card: column -> value, only the columns it has."""
    outcome = "stalled" if run.status == "completed" and run.did_not_train else run.status
    out: dict[str, Any] = {"outcome": outcome, "best val": run.summary.get("best_val_loss")}
    out["story"] = story_text(story(run)) or None
    out["loss spikes"] = run.summary.get("loss_spikes")
    if "spike_steps_loss" in run.summary:
        out["6-sigma steps"] = (
            f"{run.summary['spike_steps_loss']} / {run.summary['spike_steps_grad']}"
        )
    for column, pattern, how in CARD:
        out[column] = reduce_series(run, pattern, how)
    return {k: v for k, v in out.items() if v is not None}


def cards(runs: list[Run], sweep_dir: Path) -> list[dict[str, Any]]:
    """One card per run, named by its dir under the sweep, in the order of the runs."""
    out = []
    for run in runs:
        try:
            name = str(run.path.relative_to(sweep_dir))
        except ValueError:
            name = run.path.name
        out.append({"run": name, **card(run)})
    return out


def cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """A table of the cards: the columns any run has, in the card's order."""
    order = ["run", "outcome", "best val", "story", "loss spikes", "6-sigma steps"]
    order += [c for c, _, _ in CARD]
    head = [c for c in order if any(c in row for row in rows)]
    body = [[fmt(row.get(c)) for c in head] for row in rows]
    return head, body


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
