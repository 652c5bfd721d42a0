"""scripts/plan_seeds.py: Fisher's sizing by hand, and a plan over the published pilots."""

from __future__ import annotations

from math import comb
from pathlib import Path

from analysis import power
from analysis.findings import FINDINGS
from scripts import plan_seeds

ROOT = Path(__file__).resolve().parents[1]


def test_fisher_seeds_for_rates_one_and_zero_by_hand():
    # Pilot rates 1 and 0 hold exactly: every m-vs-m table is (m, 0 | 0, m), whose one-sided
    # Fisher p is 1 / C(2m, m): 1/20 at m=3 (fails 0.025), 1/70 at m=4 (passes).
    assert 1 / comb(6, 3) > 0.025 >= 1 / comb(8, 4)
    assert power.fisher_seeds([10, 0], [10, 10], "above") == 4
    assert power.fisher_seeds([0, 10], [10, 10], "below") == 4
    # Equal rates: no m up to the cap gives the test its power.
    assert power.fisher_seeds([5, 5], [10, 10], "above") is None


def test_plan_over_the_published_pilots_sizes_every_claim_once():
    rows = plan_seeds.seed_plan(ROOT / "docs" / "findings")
    ids = [(name, cid) for name, cid, _, _ in rows]
    assert ids == [(n, c.id) for n, f in FINDINGS.items() for c in f.claims]
    for _, _, n, why in rows:
        assert power.FLOOR <= n <= power.RATE_CAP, why
