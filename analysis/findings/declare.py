"""What a claim is, as data: the effects it is decided on (a named per-run measure, the arms,
the estimand, the margin and its side), the rule that picks the learning rate it is decided at,
the seeds per arm, an outcome-independent precondition, and the paper conditions it departs
from. The rule's text in every verdict and table is written from these fields (``rule_text``),
and the registry's content hash (``claim_hash``) is what a freeze records.

Arms are params a run must match. A value may be a symbol the judge resolves against the runs
(analysis/findings/judge.py): MAX / MIN, the largest or smallest value of that key among the
runs; REF_LR, the experiment's ``reproduce.ref_lr``; RUN_LR, its ``optim.lr``; EACH, one
effect per value of the key (all must hold), or its ``top`` largest values only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX, MIN, REF_LR, RUN_LR, EACH = "<max>", "<min>", "<ref_lr>", "<lr>", "<each>"

# estimand -> (arms it reads, how its effect reads in a rule's text)
ESTIMANDS = {
    "mean": (1, "mean {0}"),  # one arm's mean, t interval
    "ratio": (1, "geometric mean {0}"),  # one arm's geometric mean (t on the logs)
    "diff": (2, "{0} - {1}"),  # Welch's interval of the difference of means
    "paired": (2, "{0} - {1}, paired by seed"),  # t interval of the per-seed differences
    "ratio2": (2, "{0} / {1}"),  # ratio of geometric means, Welch on the logs
    "contrast": (0, "{w}"),  # a weighted sum of arms' means, Welch
    "slope": (1, "log-log slope of {0} against {over}"),  # per seed, then its mean
    "rate": (1, "rate of {event} runs in {0}"),  # Clopper-Pearson
    "rate2": (2, "rate of {event} runs, {0} vs {1}"),  # Fisher's exact test, one-sided
    "every": (1, "every run of {0}"),  # the rate of runs off the margin's side < EVERY_OFF
    "pairs": (2, "rate of seeds where {0} ends worse than {1}"),  # per seed pair, exact
    "split": (1, "rate of {event} runs in {0}, {where} vs not"),  # Fisher's exact test
    "curve": (2, "{stat} per seed, {0} - {1}"),  # a per-seed statistic of the loss-vs-lr curve
    "curve_ratio": (2, "{stat} per seed, {0} / {1}"),
    "curve_level": (1, "{stat} per seed, {0}"),
}
SIDE_TEXT = {"above": ">= {m:g}", "below": "<= {m:g}", "within": "within ±{m:g}"}
EVERY_OFF = 0.1  # "every run": the rate of runs off the margin's side is shown below this (exact)
EVENTS = ("trained", "not_trained", "diverged")  # what a rate counts: a run's outcome
LR_RULES = ("stable_best", "fixed", "curve")


@dataclass(frozen=True)
class Part:
    """One effect a claim is decided on: ``estimand`` of ``measure`` over ``arms``, against
    ``margin`` on ``side``."""

    estimand: str
    arms: tuple[dict[str, Any], ...]
    margin: float
    side: str
    measure: str = "best_val_loss"
    name: str = ""  # how the verdict names it (default: written from the arms)
    event: str = "not_trained"  # rate estimands: the outcome counted
    weights: tuple[float, ...] = ()  # contrast: one per arm
    over: str = "n_layer"  # slope: the param on the x axis
    stat: str = "sensitivity"  # curve estimands: analysis/findings/estimands.py CURVE_STATS
    per_decade: bool = False  # ratio2 of two lrs: the factor per decade of lr
    log: bool = False  # contrast: of the logs (the margin a factor)
    by: float = 0.0  # pairs: "ends worse" = did not train where the other did, or by >= this
    where: tuple = ()  # split: (measure, side, value) that picks the runs it compares
    among: str = "completed"  # whose values count: completed runs, or "trained" ones only
    top: int = 0  # EACH: only the top largest values

    def __post_init__(self) -> None:
        need = ESTIMANDS[self.estimand][0]
        if need and len(self.arms) != need:
            raise ValueError(f"{self.estimand} reads {need} arm(s), got {len(self.arms)}")
        if self.estimand == "contrast" and len(self.weights) != len(self.arms):
            raise ValueError("a contrast needs one weight per arm")
        if self.estimand.startswith("rate") and self.event not in EVENTS:
            raise ValueError(f"event {self.event!r}: choose one of {', '.join(EVENTS)}")


@dataclass(frozen=True)
class Gate:
    """The precondition a claim rests on, measured on runs the claim does not decide by (or on
    a measure it does not compare): when its effect's point estimate lies on the wrong side of
    its margin, the claim is NOT TESTABLE. Decided before the claim and whatever its outcome."""

    why: str  # what is absent when it fails, e.g. "no log Z divergence for z-loss to act on"
    part: Part | None = None
    setting: tuple[str, float] = ()  # or a run setting at least this, e.g. ("max_steps", 1e4)


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    parts: tuple[Part, ...]  # PASS when every part passes, FAIL when any fails
    seeds: int  # per arm, fresh seeds, fixed before the confirmatory run (docs/reproducing.md)
    lr: str = "stable_best"  # how each arm's learning rate is chosen (judge.py: LR_RULES)
    gate: Gate | None = None
    departs: str = ""  # the paper conditions this test departs from
    counted: bool = True  # False: an implementation check, shown but not counted as evidence

    def __post_init__(self) -> None:
        if self.lr not in LR_RULES:
            raise ValueError(f"{self.id}: lr rule {self.lr!r}: choose one of {LR_RULES}")


@dataclass(frozen=True)
class Figure:
    """``python scripts/compare.py SWEEP --x <x> --y <ys>``, written as report/<name>."""

    name: str
    x: str
    ys: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    experiment: str  # conf/experiment/<experiment>.yaml; the GPU size is <experiment>_gpu
    title: str
    claims: tuple[Claim, ...]
    mode: str = "train"  # how its runs run: train | init_probe
    plots: tuple[str, ...] = ("loss_curves.png",)  # the report's key figures (for --publish)
    figures: tuple[Figure, ...] = ()  # swept key vs results, drawn into the report as well
    draws: tuple[Callable[[Path], Path], ...] = ()  # other figures, drawn from the sweep dir

    @property
    def seeds(self) -> int:
        """Fresh seeds per arm of its confirmatory run: the most any of its claims needs."""
        return max(c.seeds for c in self.claims)

    @property
    def selects(self) -> bool:
        """Whether a claim takes an arm at its stable best rate: a grid first, then fresh seeds."""
        return any(c.lr == "stable_best" for c in self.claims)


# --- the rule's text -----------------------------------------------------------------------------
def arm_text(arm: dict[str, Any]) -> str:
    shown = []
    for key, value in arm.items():
        name = key.split(".")[-1]
        symbols = {MAX: f"largest {name}", MIN: f"smallest {name}", REF_LR: "ref lr",
                   RUN_LR: "the run's lr", EACH: f"each {name}"}  # fmt: skip
        if isinstance(value, bool) or value is None or value == []:
            shown.append(name if value else f"no {name}")
        elif isinstance(value, str):
            shown.append(symbols.get(value, value))
        elif isinstance(value, list | tuple):
            shown.append(f"{name}={','.join(map(str, value))}")
        else:
            shown.append(f"{name}={value:g}")
    return " ".join(shown) or "all runs"


def effect_text(part: Part) -> str:
    if part.name:
        return part.name
    arms = [arm_text(a) for a in part.arms]
    if part.estimand == "contrast":
        return " ".join(f"{w:+g}·[{a}]" for w, a in zip(part.weights, arms, strict=True))
    where = " ".join(map(str, part.where))
    return ESTIMANDS[part.estimand][1].format(*arms, over=part.over, event=part.event,
                                              stat=part.stat, w="", where=where)  # fmt: skip


def part_text(part: Part) -> str:
    what = part.measure if part.estimand not in ("rate", "rate2", "split") else ""
    per = " a decade of lr" if part.per_decade else ""
    side = SIDE_TEXT[part.side].format(m=part.margin)
    off = f", runs off it at a rate < {EVERY_OFF:g}" if part.estimand == "every" else ""
    return f"{effect_text(part)}{f' ({what})' if what else ''} {side}{per}{off}"


def rule_text(claim: Claim) -> str:
    """The claim's rule in words, written from its declaration (verdicts, tables, READMEs)."""
    text = "; ".join(part_text(p) for p in claim.parts)
    method = {"stable_best": "each arm at its stable best lr", "fixed": "at the named lr",
              "curve": "over every swept lr"}[claim.lr]  # fmt: skip
    gate = ""
    if claim.gate and claim.gate.part:
        gate = f"; NOT TESTABLE unless {part_text(claim.gate.part)}"
    elif claim.gate:
        gate = f"; NOT TESTABLE unless {claim.gate.setting[0]} >= {claim.gate.setting[1]:g}"
    return f"{text} ({method}; 95%, {claim.seeds} fresh seeds per arm){gate}"


# --- the freeze ----------------------------------------------------------------------------------
def declaration(claim: Claim) -> dict[str, Any]:
    """Everything a claim's verdict depends on, as plain data (its hash's input)."""
    return json.loads(json.dumps(asdict(claim), sort_keys=True, default=str))


def claim_hash(claim: Claim) -> str:
    text = json.dumps(declaration(claim), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def registry_hash(findings: dict[str, Finding]) -> str:
    """One hash of every claim's declaration: what verdict.json records and a freeze holds."""
    hashes = sorted(claim_hash(c) for f in findings.values() for c in f.claims)
    return hashlib.sha256("".join(hashes).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Frozen:
    """analysis/findings/frozen.json: each claim's hash at its freeze and the first of the fresh
    seeds it is decided on (first_seed .. first_seed + seeds - 1); ``next_seed``, the first seed
    no freeze has handed out yet."""

    registry: str
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> hash, first_seed
    next_seed: int = 1000
    date: str = ""
    commit: str = ""
    # experiment -> the hash of its resolved config at the freeze (experiments/registry.py:
    # config_hash): steps, sizes, data and grid are frozen with the claims
    configs: dict[str, str] = field(default_factory=dict)

    def first_seed(self, claim_id: str) -> int | None:
        entry = self.claims.get(claim_id)
        return entry["first_seed"] if entry else None

    def anew(self, claim: Claim) -> bool:
        """Whether ``claim`` was frozen under another declaration (its hash moved since)."""
        entry = self.claims.get(claim.id)
        return entry is not None and entry.get("hash") != claim_hash(claim)
