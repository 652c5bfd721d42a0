"""Uncertainty over seeds, for verdicts: a 95% confidence interval on an effect, and the decision
it supports against a margin fixed before the runs.

The intervals are Student t over seeds: for one arm, mean ± t(0.975, n-1) · s/√n; for a
difference of two arms' means, Welch's interval (each arm its own variance, Welch-Satterthwaite
degrees of freedom). Seeds are the independent replicates; a run is one seed.

A claim says on which side of its margin the effect lies:

    side "above"   effect >= margin   PASS when the interval lies above, FAIL when below
    side "below"   effect <= margin   PASS when the interval lies below, FAIL when above
    side "within"  |effect| <= margin PASS when the interval lies inside ±margin, FAIL when it
                                      lies wholly outside it

and INCONCLUSIVE when the interval straddles the boundary: the noise of these seeds cannot tell.
An INCONCLUSIVE verdict says how many seeds per arm the observed spread would need for the
interval's half-width to clear the boundary from the observed effect.

A diverged run scores +inf (worse than any run that trained): an arm with one is +inf, and an
effect between an infinite and a finite arm is decided without an interval (the diverged arm is
worse, whatever the seeds of the other do); two arms that both diverged somewhere cannot be
compared and are INCONCLUSIVE.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import t as student_t

LEVEL = 0.95
SIDES = ("above", "below", "within")


@dataclass(frozen=True)
class Interval:
    effect: float
    lo: float
    hi: float
    n: tuple[int, ...]  # seeds per arm
    sd: tuple[float, ...]  # each arm's sample sd (nan for one seed)
    method: str

    def text(self, digits: int = 3) -> str:
        if math.isinf(self.effect) or math.isnan(self.effect):
            return f"{self.effect} ({self.method})"
        return (
            f"{self.effect:+.{digits}f} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}] "
            f"({LEVEL:.0%} {self.method}, n={'/'.join(map(str, self.n))})"
        )


def t_quantile(df: float) -> float:
    return float(student_t.ppf(0.5 + LEVEL / 2, df))


def sd(xs: Sequence[float]) -> float:
    """Sample sd; nan for one seed or an infinite value."""
    return statistics.stdev(xs) if len(xs) > 1 and all(map(math.isfinite, xs)) else math.nan


def mean_interval(xs: Sequence[float]) -> Interval:
    """The t interval of one arm's mean over its seeds (needs >= 2 finite seeds)."""
    xs = [float(x) for x in xs]
    n, s = (len(xs),), (sd(xs),)
    if any(math.isinf(x) for x in xs):  # a diverged seed: the arm is as bad as it
        m = math.inf if math.inf in xs else -math.inf
        return Interval(m, m, m, n, s, "a diverged seed decides")
    if len(xs) < 2:
        raise ValueError("an interval needs >= 2 seeds")
    m = statistics.fmean(xs)
    return Interval(m, *interval_from(m, s[0], len(xs)), n, s, "t over seeds")


def interval_from(mean: float, sd: float | None, n: int) -> tuple[float, float]:
    """The t interval of a mean from its summary (sample sd over n seeds); unbounded for one
    seed or an unknown sd, a point for an infinite mean."""
    if not math.isfinite(mean):
        return mean, mean
    if n < 2 or sd is None or not math.isfinite(sd):
        return -math.inf, math.inf
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def tie_ranks(intervals: Sequence[tuple[float, float]]) -> list[int]:
    """Ranks for entries sorted best (lowest) first, as tie groups: an entry whose interval
    overlaps its group's leader's shares the leader's rank; the first that does not starts the
    next group at its own position (1, 1, 3, ...)."""
    ranks: list[int] = []
    leader = None
    for i, (lo, _) in enumerate(intervals):
        if leader is None or lo > intervals[leader][1]:
            leader = i
        ranks.append(leader + 1)
    return ranks


def welch_df(va: float, na: int, vb: float, nb: int) -> float:
    a, b = va / na, vb / nb
    if a + b == 0:
        return float(na + nb - 2)
    return (a + b) ** 2 / (a**2 / (na - 1) + b**2 / (nb - 1))


def diff_interval(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Welch's interval of mean(a) - mean(b) (needs >= 2 seeds per arm)."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    n, sds = (len(a), len(b)), (sd(a), sd(b))
    inf_a, inf_b = math.inf in a, math.inf in b
    if inf_a or inf_b:
        effect = math.nan if inf_a and inf_b else (math.inf if inf_a else -math.inf)
        return Interval(effect, effect, effect, n, sds, "a diverged seed decides")
    if min(n) < 2:
        raise ValueError(f"an interval needs >= 2 seeds per arm, got {n}")
    va, vb = statistics.variance(a), statistics.variance(b)
    effect = statistics.fmean(a) - statistics.fmean(b)
    half = t_quantile(welch_df(va, n[0], vb, n[1])) * math.sqrt(va / n[0] + vb / n[1])
    return Interval(effect, effect - half, effect + half, n, sds, "Welch t over seeds")


def outcome(ci: Interval, margin: float, side: str) -> str:
    """PASS, FAIL or INCONCLUSIVE: where the interval lies against the margin."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}: choose one of {', '.join(SIDES)}")
    lo, hi = ci.lo, ci.hi
    if math.isnan(ci.effect):
        return "INCONCLUSIVE"
    if side == "above":
        return "PASS" if lo >= margin else "FAIL" if hi < margin else "INCONCLUSIVE"
    if side == "below":
        return "PASS" if hi <= margin else "FAIL" if lo > margin else "INCONCLUSIVE"
    if -margin <= lo and hi <= margin:
        return "PASS"
    return "FAIL" if lo > margin or hi < -margin else "INCONCLUSIVE"


def seeds_needed(ci: Interval, margin: float, side: str, most: int = 1000) -> int | None:
    """Seeds per arm (equal arms) at which an interval with the observed sds, centred on the
    observed effect, would clear the nearest boundary; None when the effect sits on it or the
    sds are unknown."""
    boundaries = (margin,) if side != "within" else (margin, -margin)
    distance = min(abs(ci.effect - x) for x in boundaries)
    spread = sum(s**2 for s in ci.sd)
    if not math.isfinite(distance) or distance == 0 or not math.isfinite(spread):
        return None
    for n in range(2, most + 1):
        half = t_quantile(len(ci.sd) * (n - 1)) * math.sqrt(spread / n)
        if half < distance:
            return n
    return None
