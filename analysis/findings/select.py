"""Which runs a claim reads (analysis/findings/judge.py decides from them): each arm's symbols
resolved against the runs, an EACH part expanded, the rows of an arm matched, and the learning
rate each arm is decided at (``Claim.lr``):

    stable_best  chosen on the grid's seeds (every seed not in the table's ``decide_seeds``):
                 among the swept rates at which each of at least MIN_GRID grid seeds trained,
                 the one with the lowest mean best val loss (ties: the smaller rate); when no
                 rate qualifies, the rate where the most grid seeds trained (ties: the lowest
                 mean loss), and the verdict says so. Never a cliff rate two seeds survived.
    fixed        the rate the arm names (or the only one swept).
    curve        every swept rate (a claim about the loss-vs-lr curve, or about each rate).

Each arm is then read on its first ``Claim.seeds`` decide seeds (never more: no seeds are added
after a look); a table without decide seeds is read on every seed (exploratory).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

from analysis.findings.declare import EACH, MAX, MIN, REF_LR, RUN_LR, Claim, Part, part_text

MIN_GRID = 3  # grid seeds at a rate for stable_best


class NoData(Exception):
    """The table lacks what a claim needs; the message says what."""


# --- selecting runs ------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):  # a run's tuple, JSON's list
        return list(a) == list(b)
    return a == b


def label(arm: dict[str, Any]) -> str:
    return " ".join(show(k, v) for k, v in arm.items()) or "all runs"


def show(key: str, value: Any) -> str:
    """One arm value as a label reads it: a string as it is, a number as name=value, a bool,
    None or an empty list as the name or "no name", a list joined."""
    name = key.split(".")[-1]
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None or value == []:
        return name if value else f"no {name}"
    if isinstance(value, list | tuple):
        return f"{name}={','.join(map(str, value))}"
    return f"{name}={value:g}"


def key_values(rows: list[dict], key: str) -> list[Any]:
    return sorted({r["arm"][key] for r in rows if r["arm"].get(key) is not None})


def resolve(arm: dict[str, Any], rows: list[dict], settings: dict) -> dict[str, Any]:
    """The arm's symbols (MAX, MIN, REF_LR) as the values they stand for in these runs."""
    out = {}
    for key, value in arm.items():
        if value in (REF_LR, RUN_LR):
            name = "ref_lr" if value == REF_LR else "lr"
            if settings.get(name) is None:
                raise NoData(f"the experiment sets no {name}")
            value = settings[name]
        elif value in (MAX, MIN):
            found = key_values(rows, key)
            if not found:
                raise NoData(f"no runs vary {key}")
            value = found[-1] if value == MAX else found[0]
        out[key] = value
    return out


def expand(part: Part, rows: list[dict]) -> list[tuple[str, Part]]:
    """One part per value of an EACH key (its ``top`` largest only, when set), each named by its
    rule's text (its measure and margin too: two parts of a claim never share a name)."""
    keys = [k for arm in part.arms for k, v in arm.items() if v == EACH]
    if not keys:
        return [(part_text(part), part)]
    key = keys[0]
    found = key_values(rows, key)[-part.top :] if part.top else key_values(rows, key)
    if not found:
        raise NoData(f"no runs vary {key}")
    out = []
    for value in found:
        arms = tuple({k: value if v == EACH else v for k, v in a.items()} for a in part.arms)
        one = replace(part, arms=arms)
        out.append((part_text(one), one))
    return out


def matching(rows: list[dict], arm: dict[str, Any]) -> list[dict]:
    """The rows of the arm: each key at its value, or not varied by the sweep (not in the row)."""
    return [
        r for r in rows if all(k not in r["arm"] or same(r["arm"][k], v) for k, v in arm.items())
    ]


def stable_best(rows: list[dict], arm: str) -> tuple[float, str]:
    """The lr of ``rows`` (one arm's grid runs) the stable_best rule picks, and what to say."""
    by_lr: dict[float, list[dict]] = {}
    for r in rows:
        by_lr.setdefault(r["arm"]["lr"], []).append(r)

    def mean_loss(runs: list[dict]) -> float:
        found = [r["values"].get("best_val_loss") for r in runs if r["outcome"] == "trained"]
        found = [x for x in found if x is not None]
        return statistics.fmean(found) if found else math.inf

    stable = [lr for lr, rs in by_lr.items()
              if len(rs) >= MIN_GRID and all(r["outcome"] == "trained" for r in rs)]  # fmt: skip
    if stable:
        return min(stable, key=lambda lr: (mean_loss(by_lr[lr]), lr)), ""
    if not by_lr:
        raise NoData(f"{arm}: no grid runs to choose its lr on")
    trained = {lr: sum(r["outcome"] == "trained" for r in rs) for lr, rs in by_lr.items()}
    lr = min(by_lr, key=lambda x: (-trained[x], mean_loss(by_lr[x]), x))
    said = (
        f"{arm}: no swept lr at which each of >= {MIN_GRID} grid seeds trained; read at lr "
        f"{lr:g}, where {trained[lr]} of {len(by_lr[lr])} did"
    )
    return lr, said


class Reading:
    """What one claim reads: its rows, its decide seeds, and what it noted about its arms."""

    def __init__(self, claim: Claim, table: dict) -> None:
        self.claim, self.rows, self.settings = claim, table["rows"], table["settings"]
        self.fresh = set(table.get("decide_seeds") or [])  # never chooses a rate
        self.decide = sorted(self.fresh)[: claim.seeds]
        self.arms: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []

    def runs(self, arm: dict[str, Any], lr_rule: str | None = None) -> list[dict]:
        """The decide runs of one arm, at the lr its rule picks."""
        arm = resolve(arm, self.rows, self.settings)
        found = matching(self.rows, arm)
        rule = lr_rule or self.claim.lr
        shown: dict[str, Any] = {}
        if rule == "stable_best" and "lr" not in arm and len(key_values(found, "lr")) > 1:
            grid = [r for r in found if r["seed"] not in self.fresh]
            lr, said = stable_best(grid, label(arm))
            lrs = key_values(found, "lr")
            shown = {"lr": lr, "edge": lr in (lrs[0], lrs[-1])}
            self.notes += [said] if said else []
            found = [r for r in found if same(r["arm"]["lr"], lr)]
        if self.decide:
            found = [r for r in found if r["seed"] in self.decide]
        self.arms[label(arm)] = {**shown, "runs": len(found),
                                 **Counter(r["outcome"] for r in found)}  # fmt: skip
        return found
