"""Seeds per arm for each claim from its pilot (analysis/power.py), before the freeze:

    python -m scripts.plan_seeds [--pilots docs/findings]

Each finding's pilot is its published verdict's table (DIR/<finding>/verdict.json; else its
report, report/report.json, read into the finding's table), every effect estimated as the judge
would; a claim needs the
largest n any of its effects needs. A claim whose pilot lacks its per-run values (probe-derived
measures: the pilots' run dirs are not kept) gets the floor, and the table says so.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json

from analysis import power
from analysis.findings import FINDINGS, decide_finding
from analysis.findings.estimands import estimate
from analysis.findings.select import NoData, Reading, expand
from analysis.findings.settings import read_reproduce
from experiments.sweep import compose

RATES = ("rate", "pairs")  # one rate against a margin
FISHER = ("rate2", "split")  # two rates, Fisher's exact test


def fisher_seeds(k: list[int], n: list[int], side: str) -> int | None:
    """The runs per arm at which Fisher's test passes with POWER if the pilot's rates hold."""
    from scipy.stats import binom

    from analysis.stats import rate_test

    p = [ki / ni for ki, ni in zip(k, n, strict=True)]
    for m in range(2, power.RATE_CAP + 1):
        ok = sum(
            binom.pmf(a, m, p[0]) * binom.pmf(b, m, p[1])
            for a in range(m + 1)
            for b in range(m + 1)
            if rate_test(a, m, b, m, side) <= 0.025
        )
        if ok >= power.POWER:
            return m
    return None


def part_seeds(part, effect: dict) -> tuple[int | None, bool]:
    """(n the effect needs, whether it is a rate)."""
    kind = part.estimand
    if kind in RATES:
        return power.rate_seeds(effect["effect"], part.margin, part.side), True
    if kind in FISHER:
        return fisher_seeds(effect["k"], effect["n"], part.side), True
    if kind == "every":
        return None, False
    margin = (
        part.margin if part.side != "within" else part.margin * (1 if effect["effect"] >= 0 else -1)
    )
    weights = part.weights if kind == "contrast" else ()
    one = kind in ("paired", "mean", "ratio", "slope", "curve_level")  # one spread, n - 1 df
    n = power.interval_seeds(effect["effect"], margin, effect["sd"], effect["scale"], weights, one)
    return n, False


def pilot_table(name: str, finding, folder: Path) -> dict | None:
    """The pilot's per-run table as the judge read it: verdict.json's own (it holds every value
    a claim reads, the curves' first train losses included), else one built from the report."""
    verdict_path, report_path = folder / "verdict.json", folder / "report" / "report.json"
    if verdict_path.is_file():
        verdict = json.loads(verdict_path.read_text())
        if verdict.get("finding") == name and "table" in verdict:
            return verdict["table"]
    if not report_path.is_file():
        return None
    cfg = compose(finding.experiment, [])
    return decide_finding(name, json.loads(report_path.read_text()), read_reproduce(cfg))[0]


def seed_plan(pilots: Path) -> list[tuple[str, str, int, str]]:
    out = []
    for name, finding in FINDINGS.items():
        folder = pilots / ("f6" if name == "f13" else name)
        table = pilot_table(name, finding, folder)
        if table is None:
            out += [(name, c.id, c.seeds, "no pilot report") for c in finding.claims]
            continue
        for claim in finding.claims:
            needs, said, rate = [], [], False
            for part in claim.parts:
                try:
                    for label, one in expand(part, table["rows"]):
                        n, is_rate = part_seeds(one, estimate(one, Reading(claim, table)))
                        rate |= is_rate
                        needs.append(n)
                        said.append(f"{label}: {n if n is not None else '-'}")
                except NoData as err:
                    said.append(f"no pilot values ({err})")
            floor, cap = (power.RATE_FLOOR, power.RATE_CAP) if rate else (power.FLOOR, power.CAP)
            if not needs:
                n, why = floor, "no pilot effect to size it on: the floor"
            elif None in needs:  # an effect no n clears at the pilot's estimate
                n, why = power.held(None, floor, cap)
            else:
                n, why = power.held(max(needs), floor, cap)
            out.append((name, claim.id, n, f"{why}; " + "; ".join(said)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.plan_seeds", description=__doc__)
    p.add_argument("--pilots", type=Path, default=Path("docs/findings"))
    args = p.parse_args(argv)
    print("| finding | claim | seeds per arm | why |\n|---|---|---|---|")
    for name, cid, n, why in seed_plan(args.pilots):
        print(f"| {name} | {cid} | {n} | {why.replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
