"""Deciding claims from a finding's published per-run table (analysis/findings/measures.py) and
their declarations (declare.py) alone: ``judge_finding(finding, table)`` is everything a
verdict is, so ``scripts/reproduce.py --recompute`` gives the same verdicts from verdict.json.

The learning rate an arm is decided at (``Claim.lr``):
    stable_best  chosen on the grid's seeds (every seed not in the table's ``decide_seeds``):
                 among the swept rates at which each of at least MIN_GRID grid seeds trained,
                 the one with the lowest mean best val loss (ties: the smaller rate); when no
                 rate qualifies, the rate where the most grid seeds trained (ties: the lowest
                 mean loss), and the verdict says so. Never a cliff rate two seeds survived.
    fixed        the rate the arm names (or the only one swept).
    curve        every swept rate (a claim about the loss-vs-lr curve, or about each rate).
Each arm is then read on its first ``Claim.seeds`` decide seeds (never more: no seeds are added
after a look); a table without decide seeds is read on every seed and the verdict is
exploratory.

Each effect is decided on its 95% interval against its margin (analysis/stats.py: outcome):
PASS when the interval lies on the claim's side, FAIL when on the other, INCONCLUSIVE when it
straddles. Rates take Clopper-Pearson intervals and two arms' rates Fisher's exact test (PASS at
one-sided p <= 0.025 in the claim's direction, FAIL at p <= 0.025 in the other); a per-run rule
("every run") passes when each run lies on its side and fails on the first that does not. A
claim passes when every effect passes and fails when any fails. Within a finding the counted
claims' one-sided p-values are Holm-adjusted (``holm_status`` beside ``status``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

from scipy.stats import binomtest

from analysis import stats
from analysis.findings.declare import (
    EACH,
    MAX,
    MIN,
    REF_LR,
    RUN_LR,
    Claim,
    Finding,
    Frozen,
    Part,
    claim_hash,
    effect_text,
    rule_text,
)
from analysis.lr_sweep import capped, sensitivity
from runs.numbers import log_slope

MIN_SEEDS = 2  # values per arm an interval needs
MIN_GRID = 3  # grid seeds at a rate for stable_best
ALPHA = 0.025  # one-sided: a 95% two-sided interval clears its margin exactly when p <= ALPHA
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE", "NOT TESTABLE", "NO DATA")
LOSSES = ("best_val_loss", "final_val_loss")


class NoData(Exception):
    """The table lacks what a claim needs; the message says what."""


# --- selecting runs ------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return a == b


def label(arm: dict[str, Any]) -> str:
    return " ".join(str(v) if isinstance(v, str) else f"{k.split('.')[-1]}={v:g}"
                    for k, v in arm.items()) or "all runs"  # fmt: skip


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
    """One part per value of an EACH key (its ``top`` largest only, when set)."""
    keys = [k for arm in part.arms for k, v in arm.items() if v == EACH]
    if not keys:
        return [(effect_text(part), part)]
    key = keys[0]
    found = key_values(rows, key)[-part.top :] if part.top else key_values(rows, key)
    if not found:
        raise NoData(f"no runs vary {key}")
    out = []
    for value in found:
        arms = tuple({k: value if v == EACH else v for k, v in a.items()} for a in part.arms)
        one = replace(part, arms=arms)
        out.append((effect_text(one), one))
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


def values(runs: list[dict], measure: str, among: str = "completed") -> list[float]:
    runs = [r for r in runs if among != "trained" or r["outcome"] == "trained"]
    return [x for r in runs if (x := r["values"].get(measure)) is not None and math.isfinite(x)]


def enough(runs: list[dict], measure: str, arm: str, among: str = "completed") -> list[float]:
    found = values(runs, measure, among)
    if len(found) < MIN_SEEDS:
        outcomes = dict(Counter(r["outcome"] for r in runs))
        raise NoData(f"{arm}: {len(found)} runs with {measure} ({outcomes}), need >= {MIN_SEEDS}")
    return found


def by_seed(runs: list[dict], measure: str, among: str = "completed") -> dict[Any, float]:
    runs = [r for r in runs if among != "trained" or r["outcome"] == "trained"]
    return {r["seed"]: x for r in runs if (x := r["values"].get(measure)) is not None}


def worse_pairs(part: Part, a: list[dict], b: list[dict]) -> tuple[int, int]:
    """Seeds (run in both arms) where a ends worse than b: a did not train where b did, or both
    trained and a's measure is at least ``part.by`` above b's."""
    other = {r["seed"]: r for r in b}
    pairs = [(r, other[r["seed"]]) for r in a if r["seed"] in other]

    def worse(x: dict, y: dict) -> bool:
        if x["outcome"] != "trained":
            return y["outcome"] == "trained"
        vx, vy = x["values"].get(part.measure), y["values"].get(part.measure)
        return (
            y["outcome"] == "trained" and vx is not None and vy is not None and vx - vy >= part.by
        )

    return sum(worse(x, y) for x, y in pairs), len(pairs)


def fisher(part: Part, k: tuple[int, int], n: tuple[int, int]) -> dict[str, Any]:
    """Two rates compared by Fisher's exact test, one-sided in the claim's direction."""
    if min(n) < 1:
        raise NoData("an arm has no finished runs")
    other = "below" if part.side == "above" else "above"
    p_pass = stats.rate_test(k[0], n[0], k[1], n[1], part.side)
    p_fail = stats.rate_test(k[0], n[0], k[1], n[1], other)
    outcome = "PASS" if p_pass <= ALPHA else "FAIL" if p_fail <= ALPHA else "INCONCLUSIVE"
    return {"effect": k[0] / n[0] - k[1] / n[1], "lo": math.nan, "hi": math.nan, "n": list(n),
            "k": list(k), "method": "Fisher's exact test, one-sided", "scale": "rate",
            "outcome": outcome, "p_pass": p_pass, "p_fail": p_fail}  # fmt: skip


def meets(x: float | None, side: str, value: float) -> bool:
    return x is not None and (x <= value if side == "below" else x >= value)


# --- loss-vs-lr curves ---------------------------------------------------------------------------
def flat_span(curve: dict[float, float], within: float) -> float:
    """max/min lr of the contiguous rates around the best whose loss is within ``within``."""
    lrs = sorted(curve)
    i = j = lrs.index(min(curve, key=curve.get))
    floor = min(curve.values()) + within
    while i > 0 and curve[lrs[i - 1]] <= floor:
        i -= 1
    while j < len(lrs) - 1 and curve[lrs[j + 1]] <= floor:
        j += 1
    return lrs[j] / lrs[i]


def span_up(curve: dict[float, float], within: float) -> float:
    """The largest lr whose loss (and every one between) is within ``within`` of the curve's
    best, over the best lr: how far above its best rate the loss stays flat."""
    lrs = sorted(curve)
    i = j = lrs.index(min(curve, key=curve.get))
    while j < len(lrs) - 1 and curve[lrs[j + 1]] <= curve[lrs[i]] + within:
        j += 1
    return lrs[j] / lrs[i]


SPAN_WITHIN = 0.10  # "similar loss": within this of the curve's best (F13c)
CURVE_STATS = {
    "sensitivity": sensitivity,  # Wortsman et al. 2023: E_lr[l(lr) - l*]
    "best": lambda curve: min(curve.values()),
    "span": lambda curve: flat_span(curve, SPAN_WITHIN),
    "span_up": lambda curve: span_up(curve, SPAN_WITHIN),
}


def seed_curves(runs: list[dict], arm: str) -> list[dict[float, float]]:
    """One loss-vs-lr curve per seed that ran at every lr (at least 3): each run's final val
    loss capped at l0, the arm's mean first train loss (a diverged run counts at l0)."""
    lrs = key_values(runs, "lr")
    if len(lrs) < 3:
        raise NoData(f"{arm}: learning rates {lrs}, need >= 3")
    firsts = values(runs, "first_train_loss")
    if not firsts:
        raise NoData(f"{arm}: no run logged a train loss")
    l0 = statistics.fmean(firsts)
    seeds = set.intersection(*({r["seed"] for r in runs if same(r["arm"]["lr"], lr)} for lr in lrs))
    curves = [
        {r["arm"]["lr"]: capped(r["values"].get("final_val_loss"), l0)
         for r in runs if r["seed"] == seed}
        for seed in sorted(seeds, key=str)
    ]  # fmt: skip
    if len(curves) < MIN_SEEDS:
        raise NoData(f"{arm}: {len(curves)} seeds ran at every lr, need >= {MIN_SEEDS}")
    return curves


def curve_stat(part: Part, curves: list[dict[float, float]]) -> list[float]:
    return [CURVE_STATS[part.stat](c) for c in curves]


# --- estimands -----------------------------------------------------------------------------------
def interval_effect(ci: stats.Interval, part: Part) -> dict[str, Any]:
    outcome = stats.outcome(ci, part.margin, part.side)
    flip = {"above": "below", "below": "above"}
    try:
        p_pass = stats.one_sided_p(ci, part.margin, part.side)
        p_fail = (stats.one_sided_p(ci, part.margin, flip[part.side])
                  if part.side in flip else 1.0 - p_pass)  # fmt: skip
    except ValueError:
        p_pass = p_fail = None
    out = {"effect": ci.effect, "lo": ci.lo, "hi": ci.hi, "n": list(ci.n), "sd": list(ci.sd),
           "method": ci.method, "scale": ci.scale, "outcome": outcome,
           "p_pass": p_pass, "p_fail": p_fail}  # fmt: skip
    if outcome == "INCONCLUSIVE":
        out["seeds_needed"] = stats.seeds_needed(ci, part.margin, part.side)
    return out


def per_decade(ci: stats.Interval, lrs: tuple[float, float]) -> stats.Interval:
    k = 1 / abs(math.log10(lrs[0] / lrs[1]))
    return replace(ci, effect=ci.effect**k, lo=ci.lo**k, hi=ci.hi**k,
                   sd=tuple(x * k for x in ci.sd))  # fmt: skip


def rate_effect(k: int, n: int, part: Part) -> dict[str, Any]:
    if n < 1:
        raise NoData("no finished runs to count")
    lo, hi = stats.rate_interval(k, n)
    ci = stats.Interval(k / n, lo, hi, (n,), (math.nan,), "Clopper-Pearson")
    alt = {"above": "greater", "below": "less"}
    p_pass = binomtest(k, n, part.margin, alternative=alt[part.side]).pvalue
    p_fail = binomtest(k, n, part.margin, alternative=alt["below" if part.side == "above"
                                                             else "above"]).pvalue  # fmt: skip
    return {"effect": k / n, "lo": lo, "hi": hi, "n": [n], "k": [k], "method": ci.method,
            "scale": "rate", "outcome": stats.outcome(ci, part.margin, part.side),
            "p_pass": float(p_pass), "p_fail": float(p_fail)}  # fmt: skip


def counted(runs: list[dict], event: str) -> int:
    if event == "not_trained":
        return sum(r["outcome"] != "trained" for r in runs)
    return sum(r["outcome"] == event for r in runs)


def estimate(part: Part, reading: Reading) -> dict[str, Any]:
    """One effect of a claim: its estimate, interval (or test), outcome and p-values."""
    kind = part.estimand
    names = [label(resolve(a, reading.rows, reading.settings)) for a in part.arms]
    rule = "curve" if kind.startswith("curve") or kind == "slope" else None
    runs = [reading.runs(a, rule) for a in part.arms]
    if kind == "rate":
        return rate_effect(counted(runs[0], part.event), len(runs[0]), part)
    if kind == "rate2":
        return fisher(part, tuple(counted(r, part.event) for r in runs), tuple(map(len, runs)))
    if kind == "split":
        measure, side, value = part.where
        inside = [r for r in runs[0] if meets(r["values"].get(measure), side, value)]
        rest = [r for r in runs[0] if r not in inside and r["values"].get(measure) is not None]
        return fisher(part, (counted(inside, part.event), counted(rest, part.event)),
                      (len(inside), len(rest)))  # fmt: skip
    if kind == "pairs":
        return rate_effect(*worse_pairs(part, *runs), part)
    if kind == "every":
        found = enough(runs[0], part.measure, names[0], part.among)
        inside = [x > part.margin if part.side == "above" else x < part.margin for x in found]
        worst = min(found) if part.side == "above" else max(found)
        return {"effect": worst, "lo": worst, "hi": worst, "n": [len(found)],
                "violations": inside.count(False), "method": "every run (worst shown)",
                "scale": "linear", "outcome": "PASS" if all(inside) else "FAIL",
                "p_pass": None, "p_fail": None}  # fmt: skip
    if kind.startswith("curve"):
        stat = [curve_stat(part, seed_curves(r, n)) for r, n in zip(runs, names, strict=True)]
        ci = {"curve": lambda: stats.diff_interval(*stat),
              "curve_ratio": lambda: stats.ratio_interval(*stat),
              "curve_level": lambda: stats.mean_interval(stat[0])}[kind]()  # fmt: skip
        return interval_effect(ci, part)
    if kind == "slope":
        per_x = {x: by_seed(matching(runs[0], {part.over: x}), part.measure)
                 for x in key_values(runs[0], part.over)}  # fmt: skip
        if len(per_x) < 2:
            raise NoData(f"{names[0]}: {len(per_x)} values of {part.over}, need >= 2")
        seeds = set.intersection(*(set(v) for v in per_x.values()))
        slopes = [
            s
            for seed in sorted(seeds, key=str)
            if (s := log_slope(list(per_x), [v[seed] for v in per_x.values()])) is not None
        ]
        if len(slopes) < MIN_SEEDS:
            raise NoData(f"{names[0]}: {len(slopes)} seeds at every {part.over}")
        return interval_effect(stats.mean_interval(slopes), part)
    if kind == "paired":
        a, b = (by_seed(r, part.measure, part.among) for r in runs)
        if len(set(a) & set(b)) < MIN_SEEDS:
            raise NoData(f"{len(set(a) & set(b))} seeds ran in both arms, need >= {MIN_SEEDS}")
        return interval_effect(stats.paired_interval(a, b), part)
    found = [enough(r, part.measure, n, part.among) for r, n in zip(runs, names, strict=True)]
    if kind == "mean":
        ci = stats.mean_interval(found[0])
    elif kind == "ratio":
        ci = stats.ratio_interval(found[0])
    elif kind == "diff":
        ci = stats.diff_interval(*found)
    elif kind == "contrast" and part.log:
        logs = [[math.log(x) for x in xs] for xs in found]
        ci = stats.contrast_interval(logs, part.weights)
        ci = replace(ci, effect=math.exp(ci.effect), lo=math.exp(ci.lo), hi=math.exp(ci.hi),
                     scale="log")  # fmt: skip
    elif kind == "contrast":
        ci = stats.contrast_interval(found, part.weights)
    else:  # ratio2
        ci = stats.ratio_interval(*found)
        if part.per_decade:
            lrs = tuple(resolve(a, reading.rows, reading.settings)["lr"] for a in part.arms)
            ci = per_decade(ci, lrs)
    return interval_effect(ci, part)


# --- claims and findings -------------------------------------------------------------------------
def combine(effects: dict[str, dict]) -> str:
    found = {e["outcome"] for e in effects.values()}
    return "FAIL" if "FAIL" in found else "INCONCLUSIVE" if "INCONCLUSIVE" in found else "PASS"


def gate_absent(claim: Claim, table: dict) -> str | None:
    """Why the claim is NOT TESTABLE (its precondition's point estimate on the wrong side, or a
    run setting under its floor), or None."""
    gate = claim.gate
    if gate and gate.setting:
        key, floor = gate.setting
        have = table["settings"].get(key)
        if have is None or have < floor:
            return f"{gate.why} ({key} {have}, needs >= {floor:g})"
    if gate and gate.part:
        ((_, part),) = expand(gate.part, table["rows"])
        effect = estimate(part, Reading(claim, table))
        x, m = effect["effect"], part.margin
        ok = x >= m if part.side == "above" else x <= m if part.side == "below" else abs(x) <= m
        if not ok:
            return f"{gate.why} ({effect_text(part)} = {x:.3g}, needs {part.side} {m:g})"
    return None


def untrained(reading: Reading) -> str | None:
    losses = any(p.measure in LOSSES for p in reading.claim.parts)
    read = [a for a in reading.arms.values() if a["runs"]]
    if losses and read and all(a.get("trained", 0) == 0 for a in read):
        return (
            "no arm trained (every run it reads stalled or diverged): its losses compare "
            "plateaus; train longer (trainer.max_steps) so the best arm leaves the plateau"
        )
    return None


def judge_claim(claim: Claim, table: dict) -> dict[str, Any]:
    reading = Reading(claim, table)
    verdict: dict[str, Any] = {
        "id": claim.id, "statement": claim.statement, "source": claim.source,
        "rule": rule_text(claim), "departs": claim.departs, "counted": claim.counted,
        "hash": claim_hash(claim), "status": "NO DATA", "effects": {}, "arms": {},
        "note": "",
    }  # fmt: skip
    try:
        absent = gate_absent(claim, table)
        for part in claim.parts:
            for name, one in expand(part, reading.rows):
                verdict["effects"][name] = estimate(one, reading)
        verdict["status"] = combine(verdict["effects"])
        why = absent or untrained(reading)
        if why:
            verdict["before_gate"], verdict["status"] = verdict["status"], "NOT TESTABLE"
            reading.notes.insert(0, f"NOT TESTABLE: {why}")
    except NoData as err:
        verdict["status"], verdict["effects"] = "NO DATA", {}
        gone = ", ".join(f"{n} {s}" for s, n in table.get("left_out", {}).items())
        reading.notes.insert(0, f"{err}" + (f" ({gone} runs left out)" if gone else ""))
    for effect in verdict["effects"].values():
        for key in ("effect", "lo", "hi", "p_pass", "p_fail"):
            if isinstance(effect.get(key), float) and math.isfinite(effect[key]):
                effect[key] = float(f"{effect[key]:.6g}")
        if "sd" in effect:
            effect["sd"] = [float(f"{x:.6g}") if math.isfinite(x) else x for x in effect["sd"]]
    verdict["arms"], verdict["note"] = reading.arms, "; ".join(reading.notes)
    verdict["decided_on"] = reading.decide
    return verdict


def claim_p(verdict: dict, key: str, combine_: Any) -> float | None:
    """A claim's one-sided p: PASS needs every effect (the largest p), FAIL any (the smallest)."""
    ps = [e.get(key) for e in verdict["effects"].values()]
    return None if not ps or None in ps else combine_(ps)


def holm_adjust(verdicts: list[dict]) -> None:
    """Holm within the finding, over its counted, decided claims: a PASS (FAIL) whose adjusted
    p is above ALPHA is INCONCLUSIVE in ``holm_status``. A per-run rule has no p: kept."""
    decided = [
        v for v in verdicts if v["counted"] and v["status"] in ("PASS", "FAIL", "INCONCLUSIVE")
    ]
    for v in verdicts:
        v["holm_status"] = v["status"]
    for key, status, pick in (("p_pass", "PASS", max), ("p_fail", "FAIL", min)):
        tested = [(v, p) for v in decided if (p := claim_p(v, key, pick)) is not None]
        adjusted = stats.holm([p for _, p in tested])
        for (v, _), p in zip(tested, adjusted, strict=True):
            v[f"holm_{key}"] = float(f"{p:.6g}")
            if v["status"] == status and p > ALPHA:
                v["holm_status"] = "INCONCLUSIVE"


def confirmatory(verdict: dict, frozen: Frozen | None, claim: Claim) -> bool:
    """Decided under a frozen declaration, on fresh seeds, at its declared n per arm."""
    if frozen is None or frozen.claims.get(claim.id) != verdict["hash"]:
        return False
    fresh = range(frozen.first_seed, frozen.first_seed + claim.seeds)
    return len(verdict["decided_on"]) == claim.seeds and all(
        s in fresh for s in verdict["decided_on"]
    )


def judge_finding(finding: Finding, table: dict, frozen: Frozen | None = None) -> list[dict]:
    """Every claim of the finding decided on its table; raw and Holm-adjusted verdicts, each
    marked confirmatory or exploratory."""
    verdicts = [judge_claim(c, table) for c in finding.claims]
    holm_adjust(verdicts)
    for v, claim in zip(verdicts, finding.claims, strict=True):
        v["mode"] = "confirmatory" if confirmatory(v, frozen, claim) else "exploratory"
    return verdicts


def confirm_lrs(finding: Finding, table: dict, by: list[str]) -> list[dict[str, Any]]:
    """Each arm's params (the ``by`` keys) with the lr stable_best picks on the grid: what the
    confirming runs fix (only the arms a stable_best claim of the finding reads)."""
    rows = [r for r in table["rows"] if r["seed"] not in set(table.get("decide_seeds") or ())]
    groups = {tuple(r["arm"].get(k) for k in by) for r in rows}
    out = []
    for key in sorted(groups, key=str):
        arm = dict(zip(by, key, strict=True))
        found = matching(rows, {k: v for k, v in arm.items() if v is not None})
        if len(key_values(found, "lr")) > 1:
            out.append({**arm, "lr": stable_best(found, label(arm))[0]})
    return out
