"""Torch-free numerics the harness and the analysis share, defined once: the log-log slope fit
(the init probe's gradient-vs-depth slope, F1's verdicts, the figures' fitted exponents)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def log_slope(xs: Iterable[float], ys: Iterable[float]) -> float | None:
    """Least-squares slope b of log y = a + b log x (y ~ x^b); None with fewer than two
    distinct points or a value <= 0 (no logarithm)."""
    xs, ys = list(xs), list(ys)
    if len(set(xs)) < 2 or min(xs) <= 0 or min(ys) <= 0:
        return None
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )
