"""analysis/stats.py's paired intervals, exact rates, the claims' own p-values, Holm and the
ranking by tests: against closed forms, sums written out by hand and scipy's own tests."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sp

from analysis import stats


def binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X >= k) (upper) or P(X <= k) for X ~ Binomial(n, p), summed term by term."""
    terms = range(k, n + 1) if upper else range(0, k + 1)
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in terms)


@pytest.mark.parametrize("k,n", [(0, 5), (5, 5), (1, 6), (3, 6), (2, 10), (9, 20)])
def test_rate_interval_is_clopper_pearson(k: int, n: int) -> None:
    lo, hi = stats.rate_interval(k, n)
    # closed forms at the ends; elsewhere each bound leaves 2.5% in its binomial tail
    if k == 0:
        assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9)
    elif k == n:
        assert hi == 1 and lo == pytest.approx(0.025 ** (1 / n), rel=1e-9)
    else:
        assert binomial_tail(k, n, lo, upper=True) == pytest.approx(0.025, rel=1e-6)
        assert binomial_tail(k, n, hi, upper=False) == pytest.approx(0.025, rel=1e-6)
    assert lo <= k / n <= hi
    with pytest.raises(ValueError, match="0 <= k <= n"):
        stats.rate_interval(4, 3)


def test_rate_test_is_fishers_exact_one_sided_tail() -> None:
    # 5 of 6 stalled against 0 of 6: P(X >= 5) for X hypergeometric (12 runs, 5 stalls, 6 drawn)
    by_hand = sum(math.comb(5, x) * math.comb(7, 6 - x) for x in (5,)) / math.comb(12, 6)
    assert stats.rate_test(5, 6, 0, 6, "above") == pytest.approx(by_hand, rel=1e-9)
    assert stats.rate_test(0, 6, 5, 6, "below") == pytest.approx(by_hand, rel=1e-9)
    assert stats.rate_test(3, 6, 3, 6, "above") > 0.5  # no evidence either way


def test_paired_interval_is_t_over_per_seed_differences() -> None:
    a = {0: 3.0, 1: 4.0, 2: 5.0, 7: 9.9}
    b = {0: 2.0, 1: 2.0, 2: 2.0}  # seed 7 ran in one arm only: not paired, left out
    ci = stats.paired_interval(a, b)
    # differences 1, 2, 3: mean 2, sd 1; t(0.975, 2) = 4.302653 (tables)
    half = 4.302652729911275 / math.sqrt(3)
    assert (ci.effect, ci.n) == (2.0, (3, 3))
    assert (ci.lo, ci.hi) == pytest.approx((2 - half, 2 + half), rel=1e-9)
    ref = sp.ttest_rel([3.0, 4.0, 5.0], [2.0, 2.0, 2.0]).confidence_interval(0.95)
    assert (ci.lo, ci.hi) == pytest.approx((ref.low, ref.high), rel=1e-9)
    # A shared per-seed offset cancels: paired, the interval is narrower than Welch's.
    x = {s: 2.0 + 0.3 * s + 0.02 for s in range(5)}
    y = {s: 2.0 + 0.3 * s for s in range(5)}
    paired, welch = (
        stats.paired_interval(x, y),
        stats.diff_interval(list(x.values()), list(y.values())),
    )
    assert paired.lo > 0 and welch.lo < 0


@pytest.mark.parametrize("side", ["above", "below", "within"])
def test_one_sided_p_matches_the_interval_rule(side: str) -> None:
    """A 95% interval clears its margin exactly when the claim's one-sided p < 0.025, and the
    p equals scipy's one-sample t test against the margin."""
    xs = [0.12, 0.15, 0.11, 0.16, 0.14]
    ci = stats.mean_interval(xs)
    for margin in (0.05, ci.lo, 0.13, ci.hi, 0.2):
        p = stats.one_sided_p(ci, margin, side)
        if side == "above":
            ref = sp.ttest_1samp(xs, margin, alternative="greater").pvalue
            assert p == pytest.approx(ref, rel=1e-9)
        elif side == "below":
            ref = sp.ttest_1samp(xs, margin, alternative="less").pvalue
            assert p == pytest.approx(ref, rel=1e-9)
        verdict = stats.outcome(ci, margin, side)
        if not math.isclose(p, 0.025, rel_tol=1e-6):  # a bound on the margin: either way
            assert (p < 0.025) == (verdict == "PASS"), (margin, p, verdict)
    assert stats.one_sided_p(ci, ci.lo, "above") == pytest.approx(0.025, rel=1e-9)


def test_one_sided_p_on_a_ratio_reads_the_logs() -> None:
    ci = stats.ratio_interval([2.0, 2.2, 1.9, 2.1], [1.0, 1.05, 0.95, 1.0])
    assert stats.one_sided_p(ci, ci.lo, "above") == pytest.approx(0.025, rel=1e-6)


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> monotone 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0]  # 0.5 x 2 caps at 1, and stays monotone


def test_ranks_come_from_tests_not_from_overlapping_intervals() -> None:
    # a and b: each arm's own interval overlaps the other's, yet Welch's test separates them
    a = [2.00, 2.02, 1.98, 2.01, 1.99, 2.00]
    b = [x + 0.027 for x in (1.99, 2.01, 2.00, 1.98, 2.02, 2.00)]
    ia, ib = stats.mean_interval(a), stats.mean_interval(b)
    assert ia.hi > ib.lo
    assert stats.welch_p(stats.summary_of(a), stats.summary_of(b)) == pytest.approx(
        sp.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9
    )
    noisy = [1.9, 2.3, 2.0, 2.2, 2.1, 2.05]  # overlaps both, separated from neither
    arms = {"a": a, "b": b, "noisy": noisy}
    ranks = stats.rank_by_tests({k: stats.summary_of(v) for k, v in arms.items()})
    assert ranks == {"a": 1, "b": 2, "noisy": 1}
    far = [3.0, 3.1, 2.9, 3.05, 2.95, 3.0]
    arms = {"a": a, "far": far, "b": b}
    ranks = stats.rank_by_tests({k: stats.summary_of(v) for k, v in arms.items()})
    assert ranks == {"a": 1, "b": 2, "far": 3}
