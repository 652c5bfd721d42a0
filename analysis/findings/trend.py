"""Does an effect grow, hold or shrink with size? Its trend over a ladder of sizes: the slope of
the effect against log2 of the model's parameter count (per doubling), fitted by inverse-variance
weighted least squares on each rung's estimate and standard error (each rung decided on its own
seeds: the rungs are independent), with its 95% normal interval. An effect read on the logs
(a ratio) is fitted on its logs, so its slope is a factor per doubling.

    slope = sum w (x - xbar)(y - ybar) / sum w (x - xbar)^2,  w = 1 / se^2
    se(slope) = 1 / sqrt(sum w (x - xbar)^2)

A rung's standard error is its 95% interval's half-width over 1.96 (a t interval's is a little
wider than normal: the trend's interval is then a little wide, not narrow).
"""

from __future__ import annotations

import math
from typing import Any

Z95 = 1.959964
WORDS = ("rises", "falls", "no trend shown")


def rung_point(size: float, effect: dict[str, Any]) -> tuple[float, float, float] | None:
    """(log2 size, estimate, standard error) of one rung's effect, on the logs for a ratio;
    None when the rung has no interval to weigh it by."""
    lo, hi, y = effect.get("lo"), effect.get("hi"), effect.get("effect")
    if None in (lo, hi, y) or not all(map(math.isfinite, (lo, hi, y))):
        return None
    if effect.get("scale") == "log":
        if min(lo, hi, y) <= 0:
            return None
        lo, hi, y = math.log(lo), math.log(hi), math.log(y)
    se = (hi - lo) / (2 * Z95)
    return (math.log2(size), y, se) if se > 0 else None


def trend(points: list[tuple[float, float, float]], log: bool = False) -> dict[str, Any]:
    """The weighted slope per doubling of size with its 95% interval, and its word: rises (the
    interval above 0), falls (below), or no trend shown. Needs three rungs."""
    if len(points) < 3:
        return {"slope": None, "lo": None, "hi": None, "fitted": len(points), "trend": WORDS[2]}
    w = [1 / se**2 for _, _, se in points]
    total = sum(w)
    xbar = sum(wi * x for wi, (x, _, _) in zip(w, points, strict=True)) / total
    ybar = sum(wi * y for wi, (_, y, _) in zip(w, points, strict=True)) / total
    sxx = sum(wi * (x - xbar) ** 2 for wi, (x, _, _) in zip(w, points, strict=True))
    sxy = sum(wi * (x - xbar) * (y - ybar) for wi, (x, y, _) in zip(w, points, strict=True))
    slope, se = sxy / sxx, 1 / math.sqrt(sxx)
    lo, hi = slope - Z95 * se, slope + Z95 * se
    word = WORDS[0] if lo > 0 else WORDS[1] if hi < 0 else WORDS[2]
    if log:  # a factor per doubling
        slope, lo, hi = math.exp(slope), math.exp(lo), math.exp(hi)
    return {"slope": slope, "lo": lo, "hi": hi, "fitted": len(points), "trend": word,
            "scale": "log" if log else "linear"}  # fmt: skip


def ladder_trends(rungs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each claim's effects over the rungs (each rung: its size and its verdict.json's claims),
    with each effect's trend."""
    out = []
    first = rungs[0]["claims"] if rungs else []
    for k, claim in enumerate(first):
        for name in claim["effects"]:
            found = [(r["size"], r["claims"][k]["effects"].get(name)) for r in rungs]
            found = [(size, e) for size, e in found if e]
            points = [p for size, e in found if (p := rung_point(size, e))]
            log = any(e.get("scale") == "log" for _, e in found)
            out.append({"claim": claim["id"], "effect": name,
                        "rungs": [{"size": size, **{key: e.get(key) for key in
                                   ("effect", "lo", "hi", "outcome", "scale")}}
                                  for size, e in found],
                        **trend(points, log)})  # fmt: skip
    return out
