"""Seeds per arm from a pilot (analysis/power.py): against hand-computed cases and a simulation
of the decision it sizes."""

from __future__ import annotations

import math

import numpy as np
import scipy.stats as sp

from analysis import power, stats


def test_interval_seeds_by_hand() -> None:
    # effect 0.3 against 0.1, two arms of sd 0.1: the first n with
    # 0.2 >= (t(.975, 2(n-1)) + t(.8, 2(n-1))) * sqrt(0.02 / n)
    def clears(n: int) -> bool:
        df = 2 * (n - 1)
        return (sp.t.ppf(0.975, df) + sp.t.ppf(0.8, df)) * math.sqrt(0.02 / n) <= 0.2

    want = next(n for n in range(2, 100) if clears(n))
    assert power.interval_seeds(0.3, 0.1, (0.1, 0.1)) == want == 6
    assert power.interval_seeds(0.1, 0.1, (0.1, 0.1)) is None  # on the margin: no n does
    # a ratio is sized on the logs: x2 against x1.5 with a log-sd of 0.1
    assert power.interval_seeds(2.0, 1.5, (0.1,), "log", paired=True) == power.interval_seeds(
        math.log(2.0), math.log(1.5), (0.1,), paired=True
    )


def test_interval_seeds_give_the_power_they_promise() -> None:
    """Simulated: one arm, true mean 0.25, sd 0.2, margin 0.1; at the n it returns, the 95%
    interval lies above the margin in about 80% of the draws (the t approximation is close)."""
    n = power.interval_seeds(0.25, 0.1, (0.2,), paired=True)
    rng = np.random.default_rng(0)
    hits = sum(
        stats.outcome(stats.mean_interval(list(rng.normal(0.25, 0.2, n))), 0.1, "above") == "PASS"
        for _ in range(2000)
    )
    assert 0.75 <= hits / 2000 <= 0.9


def test_rate_seeds_are_exact() -> None:
    # every run trains: 6 of 6 is the first whose Clopper-Pearson interval clears 0.5
    assert power.rate_seeds(1.0, 0.5, "above") == 6
    assert stats.rate_interval(5, 5)[0] < 0.5 < stats.rate_interval(6, 6)[0]
    # at a true rate of 0.9 more runs are needed, and the 80% is reached exactly there
    n = power.rate_seeds(0.9, 0.5, "above")
    prob = lambda m: sum(  # noqa: E731
        sp.binom.pmf(k, m, 0.9) for k in range(m + 1) if stats.rate_interval(k, m)[0] >= 0.5
    )
    assert prob(n) >= 0.8 > max(prob(m) for m in range(1, n))


def test_held_between_the_floor_and_the_cap() -> None:
    assert power.held(3, 5, 10) == (5, "needs 3: the floor")
    assert power.held(7, 5, 10) == (7, "needs 7")
    assert power.held(72, 6, 12)[0] == 12 and "power below 80%" in power.held(72, 6, 12)[1]
    assert power.held(None, 5, 10)[0] == 10


def test_sizing_plans_for_holm_over_the_findings_claims():
    """A rate of 6 of 6 has exact p 0.5^6 = 0.0156: alone (0.025) it passes, as one of seven
    claims Holm asks 0.025 / 7 = 0.00357 of the smallest p, which takes 9 of 9 (0.5^9 = 0.00195;
    0.5^8 = 0.0039 is not enough). An interval needs more seeds at the smaller level too."""
    assert power.rate_seeds(1.0, 0.5, "above") == 6
    assert power.rate_seeds(1.0, 0.5, "above", alpha=0.025 / 7) == 9
    alone = power.interval_seeds(0.3, 0.1, (0.1, 0.1))
    among_five = power.interval_seeds(0.3, 0.1, (0.1, 0.1), alpha=0.025 / 5)
    assert among_five > alone
    # by hand at n = among_five: the distance clears t(1 - 0.005, 2(n - 1)) + t(0.8, 2(n - 1))
    from scipy.stats import t

    def clears(n: int) -> bool:
        df = 2 * (n - 1)
        return (t.ppf(1 - 0.005, df) + t.ppf(0.8, df)) * (0.02 / n) ** 0.5 <= 0.2

    assert clears(among_five) and not clears(among_five - 1)
