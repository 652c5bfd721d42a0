"""Init-probe records: per-layer gradient and residual norms of each model at initialization,
read from probe.json files (their ``runs``) or, without any, from the first values the
runs logged; averaged over seeds per variant for report.json and the per-layer plots.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.runs import CANONICAL, Run, Warnings, finite, read_json
from runs import metric_names as names
from runs import runfiles
from runs.runfiles import flatten

PARAM_KEYS = ("model", "placement", "norm", "n_layer", "n_embd", "seed", "init")
# Per-layer values: "grad_norm/layer_3", "act_norm/3", "residual_norm": [..] (after flattening).
LAYER_KEY = re.compile(
    r"(?:^|/)(grad_norms?|grad|act_norms?|residual_norms?|resid_norm)/(?:layer_?)?(\d+)$"
)
LIST_NAMES = re.compile(
    r"(?:^|/)(grad_norms?|grad|act_norms?|residual_norms?|resid_norm)(?:/layers?)?$"
)


@dataclass
class Probe:
    """Per-layer norms of one model at init: gradient norm, residual-stream norm."""

    params: dict[str, Any]
    grad: list[float]
    act: list[float]
    last_fc2: float | None
    source: str
    grad_std: list[float] = field(default_factory=list)  # as recorded by a seed-averaged probe
    act_std: list[float] = field(default_factory=list)
    # name -> one value a seed, as the init probe records them (last_fc2, act_ratio)
    per_seed: dict[str, list[float]] = field(default_factory=dict)


def is_number(value: Any) -> bool:
    return finite(value) is not None


def flat_record(record: dict, part: str = "mean") -> dict[str, Any]:
    """A record's keys joined with "/". A {"mean": m, "std": s} summary stands for its ``part``;
    with part="std" only such summaries are kept."""
    flat = flatten(record, sep="/", leaf=lambda d: "mean" in d)
    summaries = {k: v[part] for k, v in flat.items() if isinstance(v, dict) and part in v}
    return summaries if part == "std" else {**flat, **summaries}


def layer_values(flat: dict[str, Any]) -> tuple[list[float], list[float], float | None]:
    """(grad norm per layer, residual norm per layer, last-layer fc2 grad norm) of one record:
    per-layer lists, or layer_i keys."""
    layers: dict[str, dict[int, float]] = {"grad": {}, "act": {}}
    last_fc2 = None
    for key, value in flat.items():
        if (m := LAYER_KEY.search(key)) and is_number(value):
            kind = "grad" if m.group(1).startswith("grad") else "act"
            layers[kind][int(m.group(2))] = float(value)
        elif (m := LIST_NAMES.search(key)) and isinstance(value, list):
            kind = "grad" if m.group(1).startswith("grad") else "act"
            if all(is_number(v) for v in value):
                layers[kind].update({i: float(v) for i, v in enumerate(value)})
        elif "last_fc2" in key and "act" not in key and is_number(value):
            last_fc2 = float(value)
    grad = [layers["grad"][i] for i in sorted(layers["grad"])]
    act = [layers["act"][i] for i in sorted(layers["act"])]
    return grad, act, last_fc2


def parse_probe(record: dict, base: dict[str, Any], source: str) -> Probe | None:
    """One record: its per-layer norms (and their recorded std over seeds, if any)."""
    params = dict(base)
    params.update({k: v for k, v in record.items() if k in PARAM_KEYS or isinstance(v, str)})
    if "depth" in record and "n_layer" not in record:
        params["n_layer"] = record["depth"]
    grad, act, last_fc2 = layer_values(flat_record(record))
    if not (grad or act or last_fc2 is not None):
        return None
    grad_std, act_std, _ = layer_values(flat_record(record, "std"))
    found = record.get("per_seed")
    per_seed = {
        k: [float(x) for x in xs]
        for k, xs in (found.items() if isinstance(found, dict) else ())
        if isinstance(xs, list) and all(is_number(x) for x in xs)
    }
    return Probe(params, grad, act, last_fc2, source, grad_std, act_std, per_seed)


def probe_records(data: Any) -> tuple[list[dict], dict[str, Any]]:
    """A probe.json's records (its ``runs``) + the fields they share; another layout (older
    code's) holds none: python -m scripts.migrate converts it."""
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        return [], {}
    shared = {k: v for k, v in data.items() if isinstance(v, str) or k in PARAM_KEYS}
    return [r for r in runs if isinstance(r, dict)], shared


def first_logged(run: Run, pattern: re.Pattern) -> list[float]:
    found = {
        int(m.group(1)): s[0][1]
        for k, s in run.metrics.items()
        if (m := pattern.fullmatch(k)) and s
    }
    return [found[i] for i in sorted(found)]


def load_probes(
    sweep_dir: Path, runs: list[Run], fields: list[str], warn: Warnings, skip: Path | None
) -> list[Probe]:
    """probe.json records anywhere below the sweep; without any, the runs' first logged norms."""

    def variant_params(run: Run) -> dict[str, Any]:  # what names a variant, and the seed
        keys = [*CANONICAL, *fields]
        return {**{k: run.params.get(k) for k in keys}, "seed": run.seed}

    by_dir = {r.path: r for r in runs}
    probes: list[Probe] = []
    for path in sorted(sweep_dir.rglob(runfiles.PROBE)):
        if (skip and skip.resolve() in path.resolve().parents) or "wandb" in path.parts:
            continue
        data = read_json(path, warn, types=(dict, list))
        run = by_dir.get(path.parent)
        base = variant_params(run) if run else {}
        records, shared = probe_records(data)
        parsed = [parse_probe(r, {**base, **shared}, runfiles.PROBE) for r in records]
        if records and not any(parsed):
            warn.add(path, "no per-layer grad_norm/act_norm values found; ignored")
        probes += [p for p in parsed if p]
    if probes:
        return probes
    for run in runs:
        grad = first_logged(run, re.compile(r"grad_norm/layer_(\d+)"))
        act = first_logged(run, re.compile(r"act_norm/layer_(\d+)"))
        fc2 = run.metrics.get(names.LAST_FC2)
        if grad or act or fc2:
            probes.append(
                Probe(variant_params(run), grad, act, fc2[0][1] if fc2 else None, "metrics")
            )
    return probes


def mean_std_lists(lists: list[list[float]], recorded: list[float]) -> tuple[list, list]:
    """Per-index mean over seeds and sample std (the recorded std when only one list)."""
    lists = [x for x in lists if x]
    if not lists:
        return [], []
    n = min(len(x) for x in lists)
    if len(lists) == 1:
        return lists[0][:n], recorded[:n]
    columns = [[x[i] for x in lists] for i in range(n)]
    return [statistics.fmean(c) for c in columns], [statistics.stdev(c) for c in columns]


# Variant params that act only once training starts (the optimizer's): a probe at
# initialization is the same for each of their values, so its groups pool over them.
AFTER_INIT = ("lr", "warmup_steps")


def acts_at_init(key: str) -> bool:
    return key != "seed" and key not in AFTER_INIT and not key.startswith("optim.")


def probe_groups(probes: list[Probe]) -> list[dict[str, Any]]:
    """Probes averaged over seeds (and over the optimizer's settings, which cannot change a
    model at init), per set of params; 'series' labels by what varies but depth."""
    keys = sorted({k for p in probes for k in p.params if acts_at_init(k)})
    varying = [k for k in keys if len({str(p.params.get(k)) for p in probes}) > 1]
    groups: dict[tuple, list[Probe]] = {}
    for p in probes:
        groups.setdefault(tuple(str(p.params.get(k)) for k in varying), []).append(p)
    out = []
    for members in groups.values():
        params = {k: v for k, v in members[0].params.items() if acts_at_init(k)}
        fc2 = [p.last_fc2 for p in members if p.last_fc2 is not None]
        out.append(
            {
                "params": params,
                "series": " ".join(f"{k}={params.get(k)}" for k in varying if k != "n_layer")
                or "all",
                "seeds": sorted({str(p.params.get("seed")) for p in members}),
                **norm_stats(members),
                "last_fc2": statistics.fmean(fc2) if fc2 else None,
                "per_seed": {
                    k: [x for p in members for x in p.per_seed.get(k, [])]
                    for k in sorted({k for p in members for k in p.per_seed})
                },
                "source": members[0].source,
            }
        )
    return sorted(out, key=lambda g: (g["series"], depth_of(g["params"])))


def norm_stats(members: list[Probe]) -> dict[str, list[float]]:
    grad, grad_std = mean_std_lists([p.grad for p in members], members[0].grad_std)
    act, act_std = mean_std_lists([p.act for p in members], members[0].act_std)
    return {"grad_norm": grad, "grad_norm_std": grad_std, "act_norm": act, "act_norm_std": act_std}


def depth_of(params: dict[str, Any]) -> float:
    value = params.get("n_layer")
    return float(value) if is_number(value) else math.inf
