"""analysis/stats.py: the intervals against scipy's own Welch test and hand-computed cases, and
the PASS / FAIL / INCONCLUSIVE rule against a margin."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sp

from analysis import stats


def test_welch_interval_matches_scipy() -> None:
    a, b = [2.61, 2.58, 2.66, 2.63, 2.60], [2.50, 2.55, 2.49, 2.57]
    ci = stats.diff_interval(a, b)
    ref = sp.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (ci.lo, ci.hi) == pytest.approx((ref.low, ref.high), rel=1e-9)
    assert ci.effect == pytest.approx(sum(a) / 5 - sum(b) / 4)
    assert ci.n == (5, 4) and ci.method == "Welch t over seeds"


def test_mean_interval_by_hand() -> None:
    # n = 3, mean 2, sd 1: half-width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051 = 2.484138
    ci = stats.mean_interval([1.0, 2.0, 3.0])
    assert ci.effect == 2.0
    assert (ci.lo, ci.hi) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


def test_a_diverged_seed_decides_without_an_interval() -> None:
    ci = stats.diff_interval([math.inf, 2.5], [2.5, 2.6])
    assert ci.effect == ci.lo == math.inf and stats.outcome(ci, 0.2, "above") == "PASS"
    both = stats.diff_interval([math.inf, 2.5], [math.inf, 2.6])
    assert stats.outcome(both, 0.2, "above") == "INCONCLUSIVE"
    with pytest.raises(ValueError, match=">= 2 seeds"):
        stats.diff_interval([2.5], [2.6, 2.7])


@pytest.mark.parametrize(
    ("lo", "hi", "side", "want"),
    [
        (0.12, 0.20, "above", "PASS"),
        (0.02, 0.08, "above", "FAIL"),
        (0.05, 0.15, "above", "INCONCLUSIVE"),
        (-0.02, 0.04, "below", "PASS"),
        (0.06, 0.09, "below", "FAIL"),
        (0.00, 0.07, "below", "INCONCLUSIVE"),
        (-0.04, 0.04, "within", "PASS"),
        (0.06, 0.10, "within", "FAIL"),
        (-0.10, -0.06, "within", "FAIL"),
        (0.01, 0.08, "within", "INCONCLUSIVE"),
    ],
)
def test_outcome_against_a_margin(lo: float, hi: float, side: str, want: str) -> None:
    ci = stats.Interval((lo + hi) / 2, lo, hi, (3, 3), (0.01, 0.01), "t")
    margin = 0.1 if side == "above" else 0.05
    assert stats.outcome(ci, margin, side) == want


def test_seeds_needed_clears_the_margin_at_that_many_seeds() -> None:
    a, b = [2.50, 2.55], [2.46, 2.47]  # effect 0.06 against a 0.05 margin, below
    ci = stats.diff_interval(a, b)
    assert stats.outcome(ci, 0.05, "below") == "INCONCLUSIVE"
    need = stats.seeds_needed(ci, 0.05, "below")
    sds = (0.05 / math.sqrt(2), 0.01 / math.sqrt(2))

    def half(n: int) -> float:  # Welch's interval for n seeds an arm with these sds
        v = [s**2 / n for s in sds]
        df = sum(v) ** 2 / sum(x**2 / (n - 1) for x in v)
        return sp.t.ppf(0.975, df) * math.sqrt(sum(v))

    assert half(need) < 0.01 <= half(need - 1)
    on_margin = stats.Interval(0.05, 0.0, 0.1, (2, 2), (0.01, 0.01), "t")
    assert stats.seeds_needed(on_margin, 0.05, "below") is None


def test_interval_from_a_summary_is_the_t_interval() -> None:
    # one seed: unbounded
    assert stats.interval_from(2.4, None, 1) == (-math.inf, math.inf)
    lo, hi = stats.interval_from(2.0, 1.0, 3)  # = mean_interval([1, 2, 3])
    ref = stats.mean_interval([1.0, 2.0, 3.0])
    assert (lo, hi) == pytest.approx((ref.lo, ref.hi))


def test_the_lr_table_ranks_by_tests() -> None:
    from analysis import lr_sweep

    def entry(name: str, loss: float, std: float) -> dict:
        point = {"lr": 1e-3, "loss": loss, "std": std, "n": 5}
        return {"label": name, "lrs": [1e-3], "points": [point], "best_lr": 1e-3,
                "best_val_loss": loss, "did_not_train": False}  # fmt: skip

    # a - b = -0.05, Welch p = 0.12: not separated; c is 0.15 and 0.2 above both (p < 1e-4)
    entries = [entry("c", 2.60, 0.01), entry("b", 2.45, 0.04), entry("a", 2.40, 0.05)]
    lr_sweep.assign_ranks(entries)
    assert [(e["label"], e["rank"]) for e in lr_sweep.ranked(entries)] == [
        ("a", 1), ("b", 1), ("c", 3)
    ]  # fmt: skip


def test_contrast_interval_by_hand_and_as_welch() -> None:
    # Two arms weighted (1, -1) are Welch's difference.
    a, b = [2.61, 2.58, 2.66], [2.50, 2.55, 2.49, 2.57]
    ref = sp.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    ci = stats.contrast_interval((a, b), (1, -1))
    assert (ci.lo, ci.hi) == pytest.approx((ref.low, ref.high), rel=1e-9)
    # A drop minus a drop, one noisy arm: (0.97 - 0.90) - (0.97 - 0.965), se = 0.01 / sqrt(3)
    # from that arm alone, so df = 2 and the half-width is t(0.975, 2) * 0.01 / sqrt(3).
    arms = ([0.97, 0.97], [0.89, 0.90, 0.91], [0.97, 0.97], [0.965, 0.965])
    ci = stats.contrast_interval(arms, (1, -1, -1, 1))
    half = sp.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)
    assert ci.effect == pytest.approx(0.065)
    assert (ci.lo, ci.hi) == pytest.approx((0.065 - half, 0.065 + half), rel=1e-9)
    with pytest.raises(ValueError, match="finite"):
        stats.contrast_interval(([1.0, math.inf], [1.0, 2.0]), (1, -1))


def test_ratio_interval_is_the_t_interval_on_logs() -> None:
    xs = [2.0, 2.5, 3.1, 2.2]
    ref = sp.ttest_1samp([math.log(x) for x in xs], 0.0).confidence_interval(0.95)
    ci = stats.ratio_interval(xs)
    assert ci.effect == pytest.approx(math.prod(xs) ** 0.25)  # the geometric mean
    assert (ci.lo, ci.hi) == pytest.approx((math.exp(ref.low), math.exp(ref.high)), rel=1e-9)
    two = stats.ratio_interval([6.0, 7.0, 6.5], [3.0, 2.8])
    assert two.effect == pytest.approx((6 * 7 * 6.5) ** (1 / 3) / math.sqrt(3.0 * 2.8))
    assert two.scale == "log" and stats.outcome(two, 2.0, "above") == "INCONCLUSIVE"
    # seeds_needed measures the distance on the logs, where the sds are
    ci = stats.ratio_interval([2.1, 2.6, 1.9])
    need = stats.seeds_needed(ci, 1.5, "above")
    assert need is not None and need > 3
    with pytest.raises(ValueError, match="positive"):
        stats.ratio_interval([1.0, 0.0])
