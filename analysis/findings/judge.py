"""Deciding claims from a finding's published per-run table (analysis/findings/measures.py) and
their declarations (declare.py) alone: ``judge_finding(finding, table)`` is everything a
verdict is, so ``scripts/reproduce.py --recompute`` gives the same verdicts from verdict.json.
Which runs each claim reads: select.py (the lr rule, the decide seeds); each effect:
estimands.py. A claim passes when every effect passes (intersection-union: each effect at ALPHA,
no correction needed) and fails when one effect fails with its p Bonferroni-corrected for the
claim's number of effects (a FAIL needs only one, so each is a chance to fail falsely); a gate
decided before it (and whatever its outcome) makes it NOT TESTABLE. Within a finding the counted
claims' one-sided p-values are Holm-adjusted (``holm_status`` beside ``status``); a verdict is
confirmatory when its claim is the frozen one and it was decided on the fresh seeds.
"""

from __future__ import annotations

from typing import Any

from analysis import stats
from analysis.findings.declare import Claim, Finding, Frozen, claim_hash, effect_text, rule_text
from analysis.findings.estimands import ALPHA, estimate
from analysis.findings.measures import round_value
from analysis.findings.select import (
    NoData,
    Reading,
    expand,
    key_values,
    label,
    matching,
    stable_best,
)

VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE", "NOT TESTABLE", "NO DATA")
LOSSES = ("best_val_loss", "final_val_loss")


# --- claims and findings -------------------------------------------------------------------------
def fails(effect: dict, k: int) -> bool:
    """The effect's FAIL holds inside a claim of ``k`` effects: its p_fail x k <= ALPHA (an effect
    with no p fails as it stands)."""
    if effect["outcome"] != "FAIL":
        return False
    p = effect.get("p_fail")
    return p is None or min(1.0, k * p) <= ALPHA


def combine(effects: dict[str, dict]) -> str:
    found = list(effects.values())
    if all(e["outcome"] == "PASS" for e in found):
        return "PASS"
    return "FAIL" if any(fails(e, len(found)) for e in found) else "INCONCLUSIVE"


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
    """The one gate every claim that compares losses or outcomes shares: when none of the runs it
    reads trained, it compares plateaus. A claim that one arm trains (a rate of trained runs) is
    decided by exactly that, so FAILs instead."""
    losses = any(p.measure in LOSSES and p.estimand != "rate" for p in reading.claim.parts)
    read = [a for a in reading.arms.values() if a["runs"]]
    if losses and read and all(a.get("trained", 0) == 0 for a in read):
        return (
            "no arm trained (every run it reads stalled or diverged): its losses compare "
            "plateaus; train longer (trainer.max_steps) so the best arm leaves the plateau"
        )
    return None


def censored(effects: dict[str, dict]) -> str | None:
    """Why a claim on where an optimum sits cannot be decided: a seed's best rate at the grid's
    edge, where the true optimum may lie past it (its interval would be too narrow)."""
    edges = {name: e["censored"] for name, e in effects.items() if sum(e.get("censored", ()))}
    if not edges:
        return None
    said = "; ".join(f"{'/'.join(map(str, k))} of {'/'.join(map(str, e['n']))} seeds"
                     for k, e in ((v, effects[n]) for n, v in edges.items()))  # fmt: skip
    return (
        f"a best rate at the grid's edge ({said}): the optimum may lie past it; widen the "
        "grid (reproduce.widen) to decide it"
    )


def judge_claim(claim: Claim, table: dict) -> dict[str, Any]:
    reading = Reading(claim, table)
    verdict: dict[str, Any] = {
        "id": claim.id, "statement": claim.statement, "source": claim.source,
        "rule": rule_text(claim), "departs": claim.departs, "counted": claim.counted,
        "hash": claim_hash(claim), "status": "NO DATA", "effects": {}, "arms": {},
        "note": "",
    }  # fmt: skip
    absent = None
    try:
        absent = gate_absent(claim, table)
        for part in claim.parts:
            for name, one in expand(part, reading.rows):
                verdict["effects"][name] = estimate(one, reading)
        verdict["status"] = combine(verdict["effects"])
        why = absent or untrained(reading) or censored(verdict["effects"])
        if why:
            verdict["before_gate"], verdict["status"] = verdict["status"], "NOT TESTABLE"
            reading.notes.insert(0, f"NOT TESTABLE: {why}")
    except NoData as err:
        # a precondition that failed explains an effect with no values (F18d: no loss spike,
        # so no lead to measure): NOT TESTABLE, not NO DATA
        verdict["status"], verdict["effects"] = ("NOT TESTABLE" if absent else "NO DATA"), {}
        gone = ", ".join(f"{n} {s}" for s, n in table.get("left_out", {}).items())
        reading.notes.insert(0, f"{err}" + (f" ({gone} runs left out)" if gone else ""))
        if absent:
            reading.notes.insert(0, f"NOT TESTABLE: {absent}")
    for effect in verdict["effects"].values():
        for key in ("effect", "lo", "hi", "p_pass", "p_fail"):
            if isinstance(effect.get(key), float):
                effect[key] = round_value(effect[key])
        if "sd" in effect:
            effect["sd"] = [round_value(x) for x in effect["sd"]]
    verdict["arms"], verdict["note"] = reading.arms, "; ".join(reading.notes)
    verdict["decided_on"] = reading.decide
    return verdict


def claim_p(verdict: dict, key: str, combine_: Any) -> float | None:
    """A claim's one-sided p: PASS needs every effect (the largest p), FAIL any (the smallest,
    times the number of effects: Bonferroni inside the claim)."""
    ps = [e.get(key) for e in verdict["effects"].values()]
    if not ps or None in ps:
        return None
    return combine_(ps) if key == "p_pass" else min(1.0, len(ps) * combine_(ps))


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
    entry = frozen.claims.get(claim.id) if frozen else None
    if entry is None or entry["hash"] != verdict["hash"]:
        return False
    fresh = range(entry["first_seed"], entry["first_seed"] + claim.seeds)
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
