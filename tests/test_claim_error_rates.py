"""How often the judge decides falsely when the truth sits exactly at a claim's margin, by
simulation: a claim of k parts PASSes only when every part does (intersection-union) and FAILs
on one part's p_fail times k (Bonferroni inside the claim), so either false decision stays at or
under ALPHA = 2.5% per side, within the simulation's error. Deciding a FAIL on the smallest p
uncorrected (the earlier rule) is shown to exceed it, so the check can fail."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from analysis import stats
from analysis.findings.estimands import ALPHA, interval_effect
from analysis.findings.judge import combine

SIMS = 2000
SLACK = 3 * math.sqrt(ALPHA * (1 - ALPHA) / SIMS)  # three simulation standard errors


def effect(p_fail: float | None, outcome: str = "FAIL") -> dict:
    return {"outcome": outcome, "p_fail": p_fail, "p_pass": 1.0}


def test_a_fail_needs_its_p_times_the_claims_parts_by_hand() -> None:
    assert combine({"a": effect(0.02)}) == "FAIL"  # one part: 0.02 <= 0.025
    # two parts: 2 x 0.02 = 0.04 > 0.025, so the FAIL does not hold; 2 x 0.01 = 0.02 does
    assert combine({"a": effect(0.02), "b": effect(0.3, "INCONCLUSIVE")}) == "INCONCLUSIVE"
    assert combine({"a": effect(0.01), "b": effect(0.3, "INCONCLUSIVE")}) == "FAIL"
    assert combine({"a": effect(None), "b": effect(0.3, "INCONCLUSIVE")}) == "FAIL"  # per run
    assert combine({"a": effect(0.001, "PASS"), "b": effect(0.002, "PASS")}) == "PASS"


def at_the_margin(rng: random.Random, k: int, seeds: int = 6) -> list[dict]:
    """k parts, each a Welch difference of two arms whose true difference is the margin (0)."""
    part = SimpleNamespace(margin=0.0, side="above")
    out = []
    for _ in range(k):
        a = [rng.gauss(0, 1) for _ in range(seeds)]
        b = [rng.gauss(0, 1) for _ in range(seeds)]
        out.append(interval_effect(stats.diff_interval(a, b), part))
    return out


@pytest.mark.parametrize("k", [1, 2, 5])
def test_false_decisions_at_the_margin_stay_under_alpha_per_side(k: int, monkeypatch) -> None:
    # the seeds an INCONCLUSIVE effect would need: no part of the decision, and 95% of its time
    monkeypatch.setattr(stats, "seeds_needed", lambda *args, **kwargs: None)
    rng = random.Random(1000 + k)
    fail = passed = old_fail = 0
    for _ in range(SIMS):
        effects = at_the_margin(rng, k)
        verdict = combine({str(i): e for i, e in enumerate(effects)})
        fail += verdict == "FAIL"
        passed += verdict == "PASS"
        old_fail += any(e["outcome"] == "FAIL" for e in effects)
    assert fail / SIMS <= ALPHA + SLACK, (k, fail / SIMS)
    assert passed / SIMS <= ALPHA + SLACK, (k, passed / SIMS)
    if k == 5:  # the uncorrected rule: about 1 - 0.975**5 = 11.9% false FAILs
        assert old_fail / SIMS > 0.08
