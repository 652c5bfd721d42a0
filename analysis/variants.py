"""Runs -> variants: the runs of a sweep grouped by the config fields that vary across it (never
the seed), with mean ± sample std over seeds of each result.
"""

from __future__ import annotations

import html
import re
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from analysis.runs import CANONICAL, PROBE_RESULTS, RUN_FIELDS, Run, finite
from runs import runfiles
from runs.record import FINISHED


def sort_key(value: Any) -> tuple:
    """Orders None, numbers and strings together without comparing across types."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, value, "")
    return (2, 0, str(value))


def partition(runs: list[Run], fields: list[str]) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.params.get(f) for f in fields), []).append(run)
    return groups


def seed_collisions(runs: list[Run], fields: list[str]) -> int:
    """Runs sharing a seed with another run of their group: those groups merge variants."""
    return sum(
        n - 1 for g in partition(runs, fields).values() for n in Counter(r.seed for r in g).values()
    )


def grid_seeds(seeds_at_each_rate: list[list[Any]]) -> set[str]:
    """The seeds of an lr grid: those run at more than one of the rates (all of them when there is
    one rate). A seed run at one rate only is a confirming seed or an arm's: it never enters the
    choice of a best rate."""
    at = Counter(str(s) for seeds in seeds_at_each_rate for s in set(map(str, seeds)))
    if len(seeds_at_each_rate) < 2:
        return set(at)
    return {s for s, n in at.items() if n > 1}


def variant_fields(runs: list[Run]) -> list[str]:
    """The fields that tell variants apart: canonical ones that vary, plus the fewest others.

    Seed-derived fields (a run name ending in -s0) vary too, so other fields join only while some
    group still holds two runs with one seed; each time the field giving the coarsest split wins
    (among equals, a group's choice such as optim.name before a setting it implies).
    """
    keys = sorted({k for r in runs for k in r.params})
    varying = [k for k in keys if len({r.params.get(k) for r in runs}) > 1]
    chosen = [k for k in CANONICAL if k in varying]
    others = [k for k in varying if k not in chosen]
    while others and (clash := seed_collisions(runs, chosen)):
        best = min(
            others,
            key=lambda k: (
                seed_collisions(runs, [*chosen, k]) >= clash,
                len(partition(runs, [*chosen, k])),
                not k.endswith(".name"),  # a tie goes to a group's choice (optim.name)
                k,
            ),
        )
        if seed_collisions(runs, [*chosen, best]) >= clash:
            break
        chosen.append(best)
        others.remove(best)
    return chosen


def differing(group: list[Run]) -> list[str]:
    """Settings that differ between runs of one group (a key some run does not record: unknown,
    not compared)."""
    keys = set.intersection(*(set(r.settings) for r in group)) if group else set()
    return sorted(k for k in keys if len({repr(r.settings[k]) for r in group}) > 1)


def first_written(run: Run) -> tuple:
    """The order in which repeats of one seed are kept: a finished run before one that failed or
    never ended, then the shallowest dir (a backup sits below the sweep's own), then the earliest
    summary.json (a rerun into new dirs came later)."""
    summary = run.path / runfiles.SUMMARY
    written = summary.stat().st_mtime if summary.is_file() else float("inf")
    return run.status not in FINISHED, len(run.path.parts), written, str(run.path)


def poolable(runs: list[Run], fields: list[str]) -> tuple[list[Run], list[str], list[str]]:
    """The runs a variant may pool as seeds, the fields that tell variants apart, and a line
    for each run left out. Runs of one variant share every setting that changes the numbers but
    the seed: a setting that still differs inside a group (300 steps among 30-step runs, another
    batch size) becomes a variant field of its own, so those runs are a variant named by it, never
    "another seed". Each seed counts once: a run with the settings and seed of another (a copy of
    the sweep dir, a rerun into new dirs) is left out, naming the run it repeats. A variant whose
    runs ran different code (summary.json's ``code_version``) is said, not split."""
    fields, splits = list(fields), []
    while True:
        groups = partition(runs, fields)
        split = sorted({k for g in groups.values() for k in differing(g)} - set(fields))
        if not split:
            break
        fields.append(min(split, key=lambda k: (-len(partition(runs, [*fields, k])), k)))
        values = ", ".join(sorted({str(r.params.get(fields[-1])) for r in runs}))
        splits.append(f"{fields[-1]} differs between runs of one variant ({values}): they are "
                      "variants of their own, never seeds of one")  # fmt: skip
    kept, said = [], splits
    for group in partition(runs, fields).values():
        first: dict[str, Run] = {}
        for run in sorted(group, key=first_written):
            seed = run.seed
            if seed is not None and str(seed) in first:
                said.append(
                    f"{run.path}: the same settings and seed {seed} as {first[str(seed)].path}; "
                    "left out (a copy or a rerun counts once)"
                )
                continue
            first.setdefault(str(seed), run)
            kept.append(run)
        versions = sorted({str(r.summary.get("code_version")) for r in group})
        if len(versions) > 1:
            name = label({f: group[0].params.get(f) for f in fields}, fields)
            said.append(f"{name}: its runs ran different code (code_version {', '.join(versions)})")
    kept.sort(key=lambda r: str(r.path))
    return kept, fields, said


def stats(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Mean, sample std (None for one value) and n over the finite values; None if none."""
    vals = [v for v in values if finite(v) is not None]
    if not vals:
        return None
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return {"mean": statistics.fmean(vals), "std": std, "n": len(vals), "values": vals}


def label(params: dict[str, Any], fields: Iterable[str]) -> str:
    short = {"n_layer": "L", "warmup_steps": "warmup"}
    parts = [f"{short.get(f, f.split('.')[-1])}={params.get(f)}" for f in fields]
    return " ".join(parts) or "all runs"


def md_cell(text: Any) -> str:
    """A markdown table cell showing ``text`` literally: a ``|`` would end the cell, a newline
    the row, raw HTML would render, ``[text](url)`` would be a live link and a backtick open a
    code span (report.html escapes the same values)."""
    flat = html.escape(" ".join(str(text).split())).replace("|", "\\|")
    return flat.replace("`", "\\`").replace("](", "\\](")


def md_code(text: Any) -> str:
    """``text`` as one inline code span that shows it literally: on one line, fenced by more
    backticks than it holds in a row (CommonMark), so no value can end the span or add markup."""
    flat = " ".join(str(text).split())
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


@dataclass
class Variant:
    params: dict[str, Any]  # the canonical fields plus the variant fields
    runs: list[Run]
    label: str

    def row(self) -> dict[str, Any]:
        """This variant's report.json entry; loss and acc stats over completed runs only."""
        done = [r for r in self.runs if r.status == "completed"]
        ran = [r for r in self.runs if r.status in FINISHED]
        unit = (
            "tokens_per_s" if any(r.result("tokens_per_s") for r in self.runs) else "samples_per_s"
        )
        acc = stats(r.result("best_val_acc") for r in done)
        return {
            "label": self.label,
            "params": self.params,
            "seeds": sorted({r.seed for r in self.runs}, key=sort_key),
            "n_runs": len(self.runs),
            "status_counts": dict(sorted(Counter(r.status for r in self.runs).items())),
            "did_not_train": [why for r in done if (why := r.did_not_train)],
            "best_val_loss": stats(r.result("best_val_loss") for r in done),
            "final_val_loss": stats(r.result("final_val_loss") for r in done),
            "final_train_loss": stats(r.result("final_train_loss") for r in done),
            "best_val_acc": acc,
            "diverged_at_steps": sorted(
                (r.summary.get("diverged_at_step") for r in self.runs if r.status == "diverged"),
                key=sort_key,
            ),
            "throughput": stats(r.result(unit) for r in self.runs),
            "throughput_unit": unit,
            **{k: stats(r.result(k) for r in ran) for k in PROBE_RESULTS},  # diverged runs too
            "runs": [run_record(r) for r in sorted(self.runs, key=lambda r: sort_key(r.seed))],
        }


def run_record(run: Run) -> dict[str, Any]:
    record = {"run_dir": str(run.path), "seed": run.seed, "status": run.status}
    for name in RUN_FIELDS[1:]:
        record[name] = run.result(name) if name != "diverged_at_step" else run.summary.get(name)
    record["did_not_train"] = run.did_not_train
    if run.summary.get("error"):
        record["error"] = run.summary["error"]
    return record


def group_variants(runs: list[Run], fields: list[str]) -> list[Variant]:
    shown = [*CANONICAL, *(f for f in fields if f not in CANONICAL)]
    variants = []
    ordered = sorted(partition(runs, fields).items(), key=lambda kv: [sort_key(v) for v in kv[0]])
    for _, group in ordered:
        params = {f: group[0].params.get(f) for f in shown}
        variants.append(Variant(params, group, label(params, fields)))
    return variants
