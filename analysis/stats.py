"""Uncertainty over seeds, for verdicts: a 95% confidence interval on an effect, and the decision
it supports against a margin fixed before the runs.

The intervals are Student t over seeds: for one arm, mean ± t(0.975, n-1) · s/√n; for a
difference of two arms' means, or any weighted sum of arms' means (a contrast, e.g. one drop
minus another), Welch's interval (each arm its own variance, Welch-Satterthwaite degrees of
freedom). Ratios of positive measures (growth factors, norms) are intervals on the logs,
exponentiated back: the ratio of geometric means. Seeds are the independent replicates; a run is
one seed.

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
    sd: tuple[float, ...]  # each arm's sample sd (nan for one seed); of the logs on a log scale
    method: str
    scale: str = "linear"  # "log": effect, lo and hi are exp() of an interval on the logs

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


def diff_interval(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Welch's interval of mean(a) - mean(b) (needs >= 2 seeds per arm)."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    inf_a, inf_b = math.inf in a, math.inf in b
    if inf_a or inf_b:
        effect = math.nan if inf_a and inf_b else (math.inf if inf_a else -math.inf)
        return Interval(effect, effect, effect, (len(a), len(b)), (sd(a), sd(b)),
                        "a diverged seed decides")  # fmt: skip
    return contrast_interval((a, b), (1.0, -1.0))


def contrast_interval(arms: Sequence[Sequence[float]], weights: Sequence[float]) -> Interval:
    """Welch's interval of sum_i weights[i] * mean(arms[i]): the standard error from each arm's
    own variance, Welch-Satterthwaite degrees of freedom (needs >= 2 finite seeds per arm)."""
    arms = [[float(x) for x in arm] for arm in arms]
    n, sds = tuple(len(arm) for arm in arms), tuple(sd(arm) for arm in arms)
    if len(arms) != len(weights) or not arms:
        raise ValueError(f"{len(arms)} arms, {len(weights)} weights: give one weight per arm")
    if min(n) < 2:
        raise ValueError(f"an interval needs >= 2 seeds per arm, got {n}")
    if not all(math.isfinite(x) for arm in arms for x in arm):
        raise ValueError("a contrast needs finite values in every arm")
    pairs = list(zip(arms, weights, strict=True))
    parts = [w * w * statistics.variance(arm) / len(arm) for arm, w in pairs]
    se2 = sum(parts)
    df = (
        se2**2 / sum(p * p / (len(arm) - 1) for p, arm in zip(parts, arms, strict=True))
        if se2 > 0
        else float(sum(len(arm) - 1 for arm in arms))
    )
    effect = sum(w * statistics.fmean(arm) for arm, w in zip(arms, weights, strict=True))
    half = t_quantile(df) * math.sqrt(se2)
    return Interval(effect, effect - half, effect + half, n, sds, "Welch t over seeds")


def ratio_interval(a: Sequence[float], b: Sequence[float] | None = None) -> Interval:
    """The ratio of geometric means over seeds, a / b (or a's own geometric mean when b is
    None), with its t (or Welch) interval taken on the logs and exponentiated: for positive
    measures whose claims are factors ("grows 2x", "2x below")."""
    values = [*a, *(b or ())]
    if not all(isinstance(x, int | float) and math.isfinite(x) and x > 0 for x in values):
        raise ValueError("a ratio interval needs positive finite values")
    logs_a = [math.log(x) for x in a]
    ci = mean_interval(logs_a) if b is None else diff_interval(logs_a, [math.log(x) for x in b])
    return Interval(math.exp(ci.effect), math.exp(ci.lo), math.exp(ci.hi), ci.n, ci.sd,
                    f"{ci.method}, on logs", "log")  # fmt: skip


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
    sds are unknown. Its t quantile takes the interval's own degrees of freedom: one arm's
    n - 1, or Welch-Satterthwaite's for arms of n seeds each (which fall to n - 1 when one arm's
    sd dominates)."""
    boundaries = (margin,) if side != "within" else (margin, -margin)
    effect = ci.effect
    if ci.scale == "log":  # the sds are of the logs: measure the distance there
        if effect <= 0 or margin <= 0:
            return None
        effect, boundaries = math.log(effect), tuple(math.log(abs(x)) for x in boundaries)
    distance = min(abs(effect - x) for x in boundaries)
    spread = sum(s**2 for s in ci.sd)
    if not math.isfinite(distance) or distance == 0 or not math.isfinite(spread):
        return None
    quartic = sum(s**4 for s in ci.sd)
    for n in range(2, most + 1):
        df = (n - 1) * spread**2 / quartic if quartic > 0 else len(ci.sd) * (n - 1)
        half = t_quantile(df) * math.sqrt(spread / n)
        if half < distance:
            return n
    return None
