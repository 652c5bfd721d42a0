"""Findings as declared data: each reproduction's published claims (registry.py), what a claim
is (declare.py), the per-run values they are decided on (measures.py: one table per finding,
published in verdict.json) and the judge that decides them from that table alone (judge.py).

    decide_finding("f3", report, reproduce)  ->  (table, verdicts)
    recompute(record)                        ->  the verdicts of a published verdict.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.findings.declare import (
    Claim,
    Finding,
    Frozen,
    Part,
    registry_hash,
)
from analysis.findings.judge import VERDICTS, confirm_lrs, judge_finding
from analysis.findings.measures import CURVE_MEASURES, PROBE_MEASURES, table
from analysis.findings.registry import ALIASES, FINDINGS
from analysis.findings.select import NoData
from analysis.findings.settings import ReproduceConfig
from runs.errors import ConfigError

FROZEN = Path(__file__).with_name("frozen.json")  # written by the freeze (docs/reproducing.md)

__all__ = [
    "ALIASES",
    "FINDINGS",
    "FROZEN",
    "VERDICTS",
    "Claim",
    "Finding",
    "NoData",
    "confirm_lrs",
    "decide_finding",
    "fresh_seeds",
    "frozen",
    "read_table",
    "hash_now",
    "recompute",
    "wanted",
]


def frozen() -> Frozen | None:
    """The freeze's record, or None before the registry is frozen; a file that cannot be read
    as one is a ConfigError (one line: restore it)."""
    if not FROZEN.is_file():
        return None
    try:
        return Frozen(**json.loads(FROZEN.read_text()))
    except (OSError, ValueError, TypeError) as err:
        raise ConfigError(
            f"{FROZEN} cannot be read as a freeze ({type(err).__name__}: {err}); restore it "
            f"(git checkout -- {FROZEN.name} in its dir) before deciding or freezing"
        ) from None


def wanted(finding: Finding) -> set[str]:
    """Every per-run measure the finding's claims (and their gates) read."""
    parts: list[Part] = [p for c in finding.claims for p in c.parts]
    parts += [c.gate.part for c in finding.claims if c.gate and c.gate.part]
    found = {p.measure for p in parts} | {"best_val_loss"}  # the lr rule reads the loss
    if any(p.estimand.startswith("curve") for p in parts):
        found |= set(CURVE_MEASURES)
    return found if not found & set(PROBE_MEASURES) else set(PROBE_MEASURES)


def settings_of(reproduce: ReproduceConfig) -> dict[str, Any]:
    return {"ref_lr": reproduce.ref_lr, "lr": reproduce.lr, "max_steps": reproduce.max_steps,
            "warmup_steps": reproduce.warmup_steps}  # fmt: skip


def fresh_seeds(finding: Finding) -> list[int]:
    """The confirmatory run's seeds once the registry is frozen (none before)."""
    found = frozen()
    held = [c for c in finding.claims if found and not found.anew(c)]
    firsts = [s for c in held if (s := found.first_seed(c.id)) is not None]
    return list(range(max(firsts), max(firsts) + finding.seeds)) if firsts else []


def decide_seeds(report: dict, reproduce: ReproduceConfig, finding: Finding) -> list:
    """The seeds a finding is decided on: its frozen fresh seeds where the sweep ran them, else
    the experiment's confirming seeds (a pilot), else none (every seed: exploratory)."""
    seeds = {r.get("seed") for v in report.get("variants", []) for r in v["runs"]}
    seeds |= {
        int(s)
        for g in report.get("init_probe", [])
        for s in (g.get("per_seed") or {}).get("seed", [])
    }
    fresh = sorted(set(fresh_seeds(finding)) & seeds)
    return fresh or sorted(set(reproduce.confirm.seeds if reproduce.confirm else ()) & seeds)


def read_table(
    name: str, report: dict, reproduce: ReproduceConfig, measures: set[str] | None = None
) -> dict:
    """The finding's per-run table read from ``report``: every measure its claims name, or only
    ``measures`` (choosing the confirming rates reads the loss alone)."""
    finding = FINDINGS[ALIASES.get(name, name)]
    found = wanted(finding) if measures is None else measures
    return table(report, found, settings_of(reproduce), decide_seeds(report, reproduce, finding))


def decide_finding(
    name: str, report: dict, reproduce: ReproduceConfig | None = None, confirmable: bool = True
) -> tuple[dict, list[dict]]:
    """The finding's per-run table read from ``report`` and every claim decided on it;
    ``confirmable`` False (the runs are not what the freeze covers): every verdict exploratory."""
    reproduce = reproduce or ReproduceConfig()
    runs = read_table(name, report, reproduce)
    held = frozen() if confirmable else None
    return runs, judge_finding(FINDINGS[ALIASES.get(name, name)], runs, held)


def recompute(record: dict) -> list[dict]:
    """A published verdict.json's verdicts, decided again from its own table alone."""
    finding = FINDINGS[record["finding"]]
    held = None if record.get("exploratory") else frozen()  # its runs were not the frozen ones
    return judge_finding(finding, record["table"], held)


def hash_now() -> str:
    return registry_hash(FINDINGS)
