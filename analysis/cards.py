"""The stability card: per run, the few numbers a researcher looks at first, read from its
summary.json and metrics.csv (a number whose probe did not run is left out, not guessed):

    outcome        completed / diverged (and why a completed run did not train)
    best val       the lowest validation loss
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
"""

from __future__ import annotations

import fnmatch
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
    outcome = run.status
    if run.did_not_train:
        outcome += f" (did not train: {run.did_not_train})"
    out: dict[str, Any] = {"outcome": outcome, "best val": run.summary.get("best_val_loss")}
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
    order = ["run", "outcome", "best val", "loss spikes", "6-sigma steps", *(c for c, _, _ in CARD)]
    head = [c for c in order if any(c in row for row in rows)]
    body = [[fmt(row.get(c)) for c in head] for row in rows]
    return head, body


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
