"""Seeds per arm from a pilot: the power calculation that fixes a claim's ``seeds`` before its
registry entry is frozen (docs/reproducing.md).

Every claim is sized to pass Holm, not only its own test: a finding of m counted claims is
sized at the one-sided level alpha = 0.025 / m, the level Holm asks of its smallest p (at 6
seeds a rate's smallest exact p is 0.5^6 = 0.0156: alone it passes, as one of seven claims it
never could). An interval effect needs the n per arm at which an interval centred on the
pilot's effect, with the pilot's spread, clears the margin with probability POWER:

    |effect - margin| >= (t(1 - alpha, df) + t(POWER, df)) * sqrt(sum_i (w_i sd_i)^2 / n)

(on the logs for a ratio; w the contrast's weights, 1 otherwise; df = arms x (n - 1), n - 1 for
one arm or a paired difference). A rate needs the n at which, if the true rate is the pilot's,
its exact one-sided binomial p against the margin is <= alpha with probability POWER. Either is
held between a floor and a cap: the floor so that no claim is decided on a handful of seeds, the
cap so that the suite fits its time budget; a claim at the cap says so (its power is lower).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import binom
from scipy.stats import t as student_t

from analysis import stats
from analysis.findings.declare import EVERY_OFF, Claim
from analysis.findings.estimands import ALPHA, estimate
from analysis.findings.select import NoData, Reading, expand

POWER = 0.8
FLOOR, CAP = 5, 10  # interval claims
RATE_FLOOR, RATE_CAP = 6, 12  # rates: 6 of 6 is the fewest whose exact interval clears 0.5


def interval_seeds(
    effect: float,
    margin: float,
    sds: Sequence[float],
    scale: str = "linear",
    weights: Sequence[float] = (),
    paired: bool = False,
    alpha: float = ALPHA,
) -> int | None:
    """The seeds per arm at which the pilot's effect clears ``margin`` with POWER at the
    one-sided level ``alpha``; None when the effect sits on the margin or its spread is unknown
    (no n would do)."""
    if scale == "log":
        if effect <= 0 or margin <= 0:
            return None
        effect, margin = math.log(effect), math.log(margin)
    weights = weights or [1.0] * len(sds)
    spread = sum((w * s) ** 2 for w, s in zip(weights, sds, strict=True))
    distance = abs(effect - margin)
    if not math.isfinite(spread) or not math.isfinite(distance) or distance == 0:
        return None
    arms = 1 if paired else len(sds)
    for n in range(2, 1001):
        df = arms * (n - 1)
        needed = student_t.ppf(1 - alpha, df) + student_t.ppf(POWER, df)
        if distance >= needed * math.sqrt(spread / n):
            return n
    return None


def rate_seeds(
    rate: float, margin: float, side: str, most: int = 200, alpha: float = ALPHA
) -> int | None:
    """The runs at which an arm whose true rate is ``rate`` has an exact one-sided binomial p
    against ``margin`` on ``side`` at or below ``alpha`` with probability POWER (at 0.025 this
    is its Clopper-Pearson interval clearing the margin); None when no n up to ``most`` does."""
    for n in range(1, most + 1):
        ks = range(n + 1)
        if side == "above":  # P(X >= k | margin)
            passing = [k for k in ks if binom.sf(k - 1, n, margin) <= alpha]
        else:  # P(X <= k | margin)
            passing = [k for k in ks if binom.cdf(k, n, margin) <= alpha]
        if sum(binom.pmf(k, n, rate) for k in passing) >= POWER:
            return n
    return None


def held(n: int | None, floor: int, cap: int) -> tuple[int, str]:
    """``n`` between the floor and the cap, and what was done to it."""
    if n is None:
        return cap, "no n clears the margin at the pilot's effect: the cap"
    if n < floor:
        return floor, f"needs {n}: the floor"
    if n > cap:
        return cap, f"needs {n}: the cap (power below {POWER:.0%})"
    return n, f"needs {n}"


# --- a claim's seeds from its pilot ----------------------------------------------------------
RATES = ("rate", "pairs")  # one rate against a margin
FISHER = ("rate2", "split")  # two rates, Fisher's exact test


def fisher_seeds(k: list[int], n: list[int], side: str, alpha: float = ALPHA) -> int | None:
    """The runs per arm at which Fisher's test passes at ``alpha`` with POWER if the pilot's
    rates hold."""
    from scipy.stats import binom

    p = [ki / ni for ki, ni in zip(k, n, strict=True)]
    for m in range(2, RATE_CAP + 1):
        ok = sum(
            binom.pmf(a, m, p[0]) * binom.pmf(b, m, p[1])
            for a in range(m + 1)
            for b in range(m + 1)
            if stats.rate_test(a, m, b, m, side) <= alpha
        )
        if ok >= POWER:
            return m
    return None


def part_seeds(part, effect: dict, alpha: float = ALPHA) -> tuple[int | None, bool]:
    """(n the effect needs at the one-sided level ``alpha``, whether it is a rate)."""
    kind = part.estimand
    if kind in RATES:
        return rate_seeds(effect["effect"], part.margin, part.side, alpha=alpha), True
    if kind in FISHER:
        return fisher_seeds(effect["k"], effect["n"], part.side, alpha), True
    if kind == "every":  # the rate of runs off its side, against EVERY_OFF
        return rate_seeds(effect["effect"], EVERY_OFF, "below", alpha=alpha), True
    margin = (
        part.margin if part.side != "within" else part.margin * (1 if effect["effect"] >= 0 else -1)
    )
    weights = part.weights if kind == "contrast" else ()
    one = kind in ("paired", "mean", "ratio", "slope", "curve_level")  # one spread, n - 1 df
    n = interval_seeds(effect["effect"], margin, effect["sd"], effect["scale"], weights, one, alpha)
    return n, False


def claim_seeds(claim: Claim, table: dict, tests: int = 1) -> tuple[int, str]:
    """The seeds per arm ``claim`` needs on the pilot ``table`` to pass as one of ``tests``
    counted claims under Holm (each effect at 0.025 / tests; the largest any effect needs, held
    between the floor and the cap), and why, effect by effect."""
    needs, said, rate = [], [], False
    alpha = ALPHA / max(tests, 1)
    for part in claim.parts:
        try:
            for label, one in expand(part, table["rows"]):
                n, is_rate = part_seeds(one, estimate(one, Reading(claim, table)), alpha)
                rate |= is_rate
                needs.append(n)
                said.append(f"{label}: {n if n is not None else '-'}")
        except NoData as err:
            said.append(f"no pilot values ({err})")
    floor, cap = (RATE_FLOOR, RATE_CAP) if rate else (FLOOR, CAP)
    if not needs:
        n, why = floor, "no pilot effect to size it on: the floor"
    elif None in needs:  # an effect no n clears at the pilot's estimate
        n, why = held(None, floor, cap)
    else:
        n, why = held(max(needs), floor, cap)
    holm = f" (sized for Holm over {tests} claims)" if tests > 1 else ""
    return n, f"{why}{holm}; " + "; ".join(said)
