"""A verdict's words: each effect with its estimate, 95% interval (or test) and seeds, each arm
with its lr and outcomes; shared by the findings' verdicts (experiments/verdicts.py) and a
user's claims (analysis/claims.py)."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cell(text: Any) -> str:
    """A verdict table's cell, literally: on one line, a pipe not ending it, no live link or
    code span (a run's or an arm's name is the user's text)."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat.replace("`", "\\`").replace("](", "\\](")


def effects(found: dict[str, dict]) -> str:
    """Each effect a verdict was decided on: its estimate, 95% interval (or test) and seeds."""
    out = []
    for name, e in found.items():
        n = "/".join(map(str, e["n"]))
        if e["scale"] == "rate" and "k" in e and math.isnan(e["lo"]):  # two rates, Fisher
            shown = f"{'/'.join(map(str, e['k']))} of {n}, p={e['p_pass']:.3g} (Fisher)"
        elif e["scale"] == "rate":
            k = "/".join(map(str, e["k"]))
            shown = f"{e['effect']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}] ({k} of {n})"
        elif e["lo"] == e["hi"]:
            shown = f"{e['effect']:.4g} ({e['method']})"
        elif e["scale"] == "log":  # a factor: the ratio of geometric means
            shown = f"x{e['effect']:.3g} [x{e['lo']:.3g}, x{e['hi']:.3g}]"
        else:
            shown = f"{e['effect']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]"
        if e.get("grid_bias"):  # log_best_lr: the margin held against the claim by this
            shown += f" (margin moved {e['grid_bias']:.3f} against the claim: grid bias)"
        out.append(f"{name}: {shown}, n={n} -> {e['outcome']}")
    return "; ".join(out) or "–"


def arms(found: dict[str, dict]) -> str:
    """Each arm a verdict read: its lr (when the rule chose one), runs and their outcomes."""
    out = []
    for name, a in found.items():
        lr = f" at lr {a['lr']:g}{' (grid edge)' if a.get('edge') else ''}" if "lr" in a else ""
        outcomes = ", ".join(f"{a[k]} {k}" for k in ("trained", "stalled", "diverged") if a.get(k))
        out.append(f"{name}{lr}: {outcomes or 'no runs'}")
    return "; ".join(out)
