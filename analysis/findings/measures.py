"""The per-run values claims are decided on, read once from a sweep's report and run dirs into
one table that verdict.json publishes: a row per finished run (its arm's params, seed, outcome
and every measure its finding's claims name), so the judge (analysis/findings/judge.py) reads
nothing else and anyone can recompute a verdict from the file alone.

A run's outcome is ``trained``, ``stalled`` (completed at the plateau: runs.record.did_not_train)
or ``diverged``; a run that failed (a config error, a crash) is no row, counted in ``left_out``.
Losses and accuracies are values of runs that completed; a diverged run has none (its outcome
is the result). Probe-derived values are taken for every finished run, with what it logged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.block_profile import last_profile
from analysis.runs import Warnings, find_metrics_file, read_metrics, run_summary
from runs import metric_names as names
from runs.record import FINISHED

EARLY_FRACTION = 0.05  # "early": the first 5% of training (DeepNet's update, F3c)


class Context:
    """What one run's measures read: its report record, its depth and the run settings."""

    def __init__(self, run: dict, n_layer: int, settings: dict[str, Any]) -> None:
        self.run, self.n_layer, self.settings = run, n_layer, settings
        self.metrics: dict[str, list] | None = None  # metrics.csv, read once on first use

    def series(self, metric: str) -> list[tuple[int, float]]:
        if self.metrics is None:
            path = find_metrics_file(Path(self.run["run_dir"]))
            self.metrics = read_metrics(path, Warnings(quiet=True))
        return self.metrics.get(metric, [])

    def layers(self, prefix: str) -> list[list[tuple[int, float]]]:
        return [self.series(names.per_layer(prefix, i)) for i in range(self.n_layer)]

    def completed(self, key: str) -> float | None:
        value = self.run.get(key)
        ok = self.run["status"] == "completed" and isinstance(value, int | float)
        return float(value) if ok else None


Measure = Callable[[Context], float | None]


def at_layers(c: Context, prefix: str, index: int) -> list[float] | None:
    """Every layer's value at its first (0) or last (-1) logged step; None if one lacks it."""
    series = c.layers(prefix)
    return [s[index][1] for s in series] if series and all(series) else None


def ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a and b is not None else None


def after_warmup(c: Context) -> list[float]:
    warmup = c.settings.get("warmup_steps") or 0
    return [y for s, y in c.series(names.LOG_Z) if s >= warmup]


def early_update(c: Context) -> float | None:
    end = EARLY_FRACTION * (c.settings.get("max_steps") or 0)
    early = [y for s, y in c.series(names.UPDATE) if 0 < s <= end]
    return statistics.fmean(early) if early else None


def unigram_gap(c: Context) -> float | None:
    loss = c.completed("best_val_loss")
    unigram = (run_summary(Path(c.run["run_dir"])) or {}).get("unigram_loss")
    return unigram - loss if loss is not None and isinstance(unigram, float) else None


def last_rms(c: Context, index: int) -> float | None:
    found = at_layers(c, names.ACT_NORM, index)
    return found[-1] if found else None


def top_max(c: Context, index: int) -> float | None:
    found = at_layers(c, names.ACT_MAX, index)
    return max(found) if found else None


def profile(c: Context, key: str) -> float | None:
    """F9: the block profile at the last probe: the earlier / later half's mean cosine, the
    RMS growth over the later half (after the last block / after block L/2)."""
    found = last_profile(c.run["run_dir"], c.n_layer) if c.n_layer >= 4 else None
    if not found:
        return None
    cos, rms, mid = found["cos"], found["rms"], c.n_layer // 2
    return {
        "cos_early": lambda: statistics.fmean(cos[:mid]),
        "cos_late": lambda: statistics.fmean(cos[mid:]),
        "rms_late_growth": lambda: rms[-1] / rms[mid - 1],
    }[key]()


def min_entropy(c: Context) -> float | None:
    points = [y for s in c.layers(names.ATTN_ENTROPY_MIN) for _, y in s]
    return min(points) if points else None


def first(series: list[tuple[int, float]]) -> float | None:
    return series[0][1] if series else None


def layer_peak(c: Context, prefix: str, index: int) -> float | None:
    """The largest layer's value at the first (0) or last (-1) logged step."""
    found = at_layers(c, prefix, index)
    return max(found) if found else None


SPIKE_SIGMA, SPIKE_WINDOW = 6.0, 128  # OLMo-core's rule, as spike_score logs it


def first_spike(series: list[tuple[int, float]]) -> int | None:
    """The first step whose value lies more than 6 sigma from the mean of the previous 128
    (std with n - 1; scored once 64 values are held, the current one included)."""
    values = [v for _, v in series]
    for k, (step, value) in enumerate(series):
        history = values[max(0, k - SPIKE_WINDOW) : k]
        if k + 1 >= max(20, SPIKE_WINDOW // 2) and len(history) >= 2:
            std = statistics.stdev(history)
            if std > 0 and abs(value - statistics.fmean(history)) > SPIKE_SIGMA * std:
                return step
    return None


def update_lead(c: Context) -> float | None:
    """Steps from the Adam update norm's first 6-sigma spike to the loss's first (positive: the
    update spiked first); None when the loss never spiked. An update that never spiked before
    the loss did leads by 0 or less: the loss's step minus the run's end."""
    loss = next((s for s, z in c.series(names.SPIKE_LOSS_Z) if z > SPIKE_SIGMA), None)
    if loss is None:
        return None
    update = first_spike(c.series(f"{names.ADAM_UPDATE}/total"))
    end = c.settings.get("max_steps") or loss
    return float(loss - (update if update is not None and update <= loss else end))


def norm_saturation(c: Context) -> float | None:
    """The share of DyT / Derf units in saturation at the last probe, the mean over the layers
    (None for a run with no such norm, or whose saturation probe never logged)."""
    last = at_layers(c, f"{names.SATURATION}/norm", -1)
    return sum(last) / len(last) if last else None


def verma_saturation(c: Context) -> float | None:
    """The share of DyT / Derf elements with |a x| > 2 at the last probe (Verma 2026's
    saturation), the mean over the layers; None without such a norm or the probe."""
    last = at_layers(c, f"{names.SATURATION}/ax2", -1)
    return sum(last) / len(last) if last else None


def summary_value(c: Context, key: str) -> float | None:
    value = (run_summary(Path(c.run["run_dir"])) or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


MEASURES: dict[str, Measure] = {
    "best_val_loss": lambda c: c.completed("best_val_loss"),
    "final_val_loss": lambda c: c.completed("final_val_loss"),
    "best_val_acc": lambda c: c.completed("best_val_acc"),
    "params": lambda c: summary_value(c, "params"),  # the model's parameter count
    "unigram_gap": unigram_gap,  # the data's unigram loss - the run's best val loss
    "first_train_loss": lambda c: first(c.series("train/loss")),  # the loss at initialization
    "early_update": early_update,  # mean update/model over the first 5% of steps
    "peak_logit": lambda c: max((y for _, y in c.series(names.MAX_LOGIT)), default=None),
    "min_entropy": min_entropy,  # lowest attn/entropy_min over layers and logged steps
    "final_abs_log_z": lambda c: abs(s[-1][1]) if (s := c.series(names.LOG_Z)) else None,
    "log_z_fall": lambda c: p[0] - min(p[1:]) if len(p := after_warmup(c)) > 1 else None,
    "log_z_min": lambda c: min(p) if (p := after_warmup(c)) else None,
    "act_depth_ratio": lambda c: ratio(
        *(x[0], x[-1]) if (x := at_layers(c, names.ACT_NORM, -1)) else (None, None)
    ),  # fmt: skip
    "rms_growth": lambda c: ratio(last_rms(c, 0), last_rms(c, -1)),  # last layer, end / step 0
    "max_growth": lambda c: ratio(top_max(c, 0), top_max(c, -1)),
    "cos_early": lambda c: profile(c, "cos_early"),
    "cos_late": lambda c: profile(c, "cos_late"),
    "rms_late_growth": lambda c: profile(c, "rms_late_growth"),
    # F18: the instruments
    "sink_share": lambda c: s[-1][1] if (s := c.series(names.ATTN_SINK)) else None,
    "massive_ratio": lambda c: layer_peak(c, names.ACT_MASSIVE, -1),  # last probe, top layer
    "massive_abs": lambda c: layer_peak(c, names.ACT_MASSIVE_ABS, -1),  # its max |h| itself
    "kurtosis_growth": lambda c: ratio(
        layer_peak(c, names.ACT_KURTOSIS, 0), layer_peak(c, names.ACT_KURTOSIS, -1)
    ),  # fmt: skip
    "min_fp16_headroom": lambda c: min((y for _, y in c.series(names.HEADROOM_FP16)), default=None),
    "loss_spikes": lambda c: summary_value(c, "loss_spikes"),  # train loss > 1.5 x running median
    "sigma_spikes": lambda c: summary_value(c, "spike_steps_loss"),  # 6-sigma loss steps
    "update_lead": update_lead,
    "skipped_steps": lambda c: summary_value(c, "skipped_steps"),  # optim.guards skip_step
    "clipped_updates": lambda c: summary_value(c, "clipped_updates"),  # clip_update
    "norm_saturation": norm_saturation,  # F20 (before 2026-12-07): |tanh| >= 0.99 at the end
    "verma_saturation": verma_saturation,  # F20: |a x| > 2 at the end, as Verma 2026
}
CURVE_MEASURES = ("final_val_loss", "first_train_loss")  # what a loss-vs-lr curve reads
PROBE_MEASURES = ("last_fc2", "act_ratio")  # F1: probe.json's per-seed values at init


def outcome(run: dict) -> str:
    if run["status"] != "completed":
        return "diverged"
    return "stalled" if run.get("did_not_train") else "trained"


def round_value(x: float | None) -> float | None:
    """Six significant digits, as verdict.json keeps every number (inf and nan as they are)."""
    return None if x is None else float(f"{x:.6g}")


def trained_rows(report: dict, wanted: set[str], settings: dict[str, Any]) -> list[dict]:
    rows = []
    for variant in report.get("variants", []):
        params = variant["params"]
        for run in variant["runs"]:
            if run["status"] not in FINISHED:
                continue
            c = Context(run, int(params.get("n_layer") or 0), settings)
            values = {m: round_value(MEASURES[m](c)) for m in sorted(wanted)}
            rows.append({"arm": params, "seed": run.get("seed"), "outcome": outcome(run),
                         "values": values, "run": Path(run["run_dir"]).name})  # fmt: skip
    return rows


def probe_rows(report: dict) -> list[dict]:
    """F1: one row per init-probe group and seed (a freshly initialized model, no training)."""
    rows = []
    for group in report.get("init_probe", []):
        per_seed = group.get("per_seed") or {}
        n = min((len(per_seed.get(k) or ()) for k in PROBE_MEASURES), default=0)
        seeds = per_seed.get("seed") or range(n)  # the probe's seeds (older records: positions)
        for i, seed in zip(range(n), seeds, strict=False):
            values = {k: round_value(per_seed[k][i]) for k in PROBE_MEASURES}
            row = {"arm": group["params"], "seed": int(seed), "outcome": "trained"}
            rows.append({**row, "values": values})
    return rows


def left_out(report: dict) -> dict[str, int]:
    """The runs no verdict reads (failed, interrupted, unfinished), by status."""
    out: dict[str, int] = {}
    for variant in report.get("variants", []):
        for run in variant["runs"]:
            if run["status"] not in FINISHED:
                out[run["status"]] = out.get(run["status"], 0) + 1
    return out


def table(report: dict, measures: set[str], settings: dict[str, Any], decide: list) -> dict:
    """The published per-run table of one finding: its rows, the run settings its claims read,
    and the seeds it is decided on (``decide``: the fresh seeds; the rest select the lr)."""
    if measures & set(PROBE_MEASURES):
        rows = probe_rows(report)
    else:
        rows = trained_rows(report, measures - set(PROBE_MEASURES), settings)
    return {"settings": settings, "decide_seeds": sorted(decide), "rows": rows,
            "left_out": left_out(report)}  # fmt: skip
