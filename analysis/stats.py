"""Uncertainty over seeds, for verdicts: a 95% confidence interval on an effect, and the decision
it supports against the margin its claim declares (analysis/findings/registry.py).

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

Whether a run trains, stalls or diverges is an outcome, not a measurement: its rate over the
runs gets an exact (Clopper-Pearson) interval and two arms' rates an exact (Fisher) test. Arms
that share init and batch order at each seed (tests/test_pairing.py) are compared paired: the
t interval of the per-seed differences. Within a finding, one-sided p-values against each
claim's margin are Holm-adjusted; a ranking comes from pairwise Welch tests, Holm-adjusted
(``rank_by_tests``), never from overlapping intervals.

A diverged run scores +inf (worse than any run that trained): an arm with one is +inf, and an
effect between an infinite and a finite arm is decided without an interval (the diverged arm is
worse, whatever the seeds of the other do); two arms that both diverged somewhere cannot be
compared and are INCONCLUSIVE.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import beta as beta_dist
from scipy.stats import fisher_exact
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
    df: float = math.nan  # the t interval's degrees of freedom (nan: not a t interval)

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
    return Interval(m, *interval_from(m, s[0], len(xs)), n, s, "t over seeds", df=len(xs) - 1)


def interval_from(mean: float, sd: float | None, n: int) -> tuple[float, float]:
    """The t interval of a mean from its summary (sample sd over n seeds); unbounded for one
    seed or an unknown sd, a point for an infinite mean."""
    if not math.isfinite(mean):
        return mean, mean
    if n < 2 or sd is None or not math.isfinite(sd):
        return -math.inf, math.inf
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


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
    return Interval(effect, effect - half, effect + half, n, sds, "Welch t over seeds", df=df)


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
                    f"{ci.method}, on logs", "log", ci.df)  # fmt: skip


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


# --- paired arms -------------------------------------------------------------------------------
def paired_interval(a: dict[int, float], b: dict[int, float]) -> Interval:
    """The t interval of the mean per-seed difference a[seed] - b[seed], over the seeds both
    arms ran (arms that share init and batch order at each seed); needs >= 2 such seeds."""
    seeds = sorted(set(a) & set(b))
    diffs = [float(a[s]) - float(b[s]) for s in seeds]
    if not all(math.isfinite(d) for d in diffs):
        raise ValueError("a paired interval needs finite values in both arms")
    ci = mean_interval(diffs)
    return dataclasses.replace(ci, n=(len(seeds), len(seeds)), method="paired t over seeds")


# --- rates: train / stall / diverge ------------------------------------------------------------
def rate_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate of k events in n runs, at LEVEL."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"a rate needs 0 <= k <= n and n >= 1, got {k} of {n}")
    alpha = 1 - LEVEL
    lo = 0.0 if k == 0 else float(beta_dist.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def rate_test(k1: int, n1: int, k2: int, n2: int, side: str) -> float:
    """One-sided p of Fisher's exact test that arm 1's rate k1/n1 is above (``side="above"``)
    or below (``"below"``) arm 2's k2/n2."""
    if side not in ("above", "below"):
        raise ValueError(f"side {side!r}: choose above or below")
    table = [[k1, n1 - k1], [k2, n2 - k2]]
    return float(fisher_exact(table, alternative="greater" if side == "above" else "less")[1])


# --- multiplicity ------------------------------------------------------------------------------
def one_sided_p(ci: Interval, margin: float, side: str) -> float:
    """The p-value of the claim's own test: that the effect lies beyond ``margin`` on its side
    (above, below; within: both one-sided tests against -margin and +margin, the larger p),
    from the t interval's effect, half-width and degrees of freedom. A 95% interval passes
    exactly when this p is below 0.025."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}: choose one of {', '.join(SIDES)}")
    if not math.isfinite(ci.df) or not math.isfinite(ci.lo) or not math.isfinite(ci.hi):
        raise ValueError(f"one_sided_p needs a t interval, got {ci.method}")
    effect, lo, hi, boundary = ci.effect, ci.lo, ci.hi, margin
    if ci.scale == "log":  # the t interval lives on the logs
        effect, lo, hi = math.log(effect), math.log(lo), math.log(hi)
        boundary = math.log(margin)
    se = (hi - lo) / (2 * t_quantile(ci.df))
    if se == 0:
        gap = {"above": effect - boundary, "below": boundary - effect}.get(side)
        gap = gap if gap is not None else boundary - abs(effect)
        return 0.0 if gap > 0 else 1.0
    if side == "above":
        return float(student_t.sf((effect - boundary) / se, ci.df))
    if side == "below":
        return float(student_t.cdf((effect - boundary) / se, ci.df))
    low = student_t.sf((effect + boundary) / se, ci.df)
    high = student_t.cdf((effect - boundary) / se, ci.df)
    return float(max(low, high))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input's order: the i-th smallest
    times (m - i), made monotone, capped at 1."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def welch_p(a: tuple[float, float, int], b: tuple[float, float, int]) -> float:
    """Two-sided p of Welch's test from each arm's (mean, sample sd, seeds); 1 when an arm has
    fewer than 2 seeds or no finite sd (nothing to test)."""
    (ma, sa, na), (mb, sb, nb) = a, b
    if min(na, nb) < 2 or not all(map(math.isfinite, (ma, mb, sa, sb))):
        return 1.0
    va, vb = sa * sa / na, sb * sb / nb
    if va + vb == 0:
        return 1.0 if ma == mb else 0.0
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    return float(2 * student_t.sf(abs(ma - mb) / math.sqrt(va + vb), df))


def rank_by_tests(
    arms: dict[str, tuple[float, float, int]], alpha: float = 1 - LEVEL
) -> dict[str, int]:
    """Ranks from pairwise two-sided Welch tests (``arms``: name -> (mean, sd, seeds)),
    Holm-adjusted over every pair: an arm's rank is 1 + the number of arms whose mean is lower
    and significantly so (lower is better). Arms no test separates share ranks; overlapping
    intervals alone never tie two arms that a test separates."""
    names = list(arms)
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    adjusted = holm([welch_p(arms[x], arms[y]) for x, y in pairs])
    beaten = dict.fromkeys(names, 0)
    for (x, y), p in zip(pairs, adjusted, strict=True):
        if p < alpha:
            beaten[x if arms[x][0] > arms[y][0] else y] += 1
    return {name: 1 + beaten[name] for name in names}


def summary_of(xs: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample sd, seeds) of one arm's per-seed values, as rank_by_tests reads them."""
    return statistics.fmean(xs), sd(xs), len(xs)
