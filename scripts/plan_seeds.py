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
from analysis.findings.settings import read_reproduce
from experiments.sweep import compose
from runs.errors import ConfigError


def pilot_table(name: str, finding, folder: Path) -> dict | None:
    """The pilot's per-run table as the judge read it: verdict.json's own (it holds every value
    a claim reads, the curves' first train losses included), else one built from the report."""
    verdict_path, report_path = folder / "verdict.json", folder / "report" / "report.json"
    if verdict_path.is_file():
        try:
            verdict = json.loads(verdict_path.read_text())
        except ValueError as err:
            raise ConfigError(f"{verdict_path} is not JSON ({err}); restore it") from None
        if not isinstance(verdict, dict):
            raise ConfigError(f"{verdict_path} holds no verdict record; restore it")
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
        tests = sum(c.counted for c in finding.claims)
        for claim in finding.claims:
            n, why = power.claim_seeds(claim, table, tests)
            out.append((name, claim.id, n, why))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.plan_seeds", description=__doc__)
    p.add_argument("--pilots", type=Path, default=Path("docs/findings"))
    args = p.parse_args(argv)
    if not args.pilots.is_dir():
        print(f"error: --pilots {args.pilots} is not a directory; pass the published findings "
              "(docs/findings) or a dir of pilot sweeps", file=sys.stderr)  # fmt: skip
        return 1
    try:
        plan = seed_plan(args.pilots)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("| finding | claim | seeds per arm | why |\n|---|---|---|---|")
    for name, cid, n, why in plan:
        print(f"| {name} | {cid} | {n} | {why.replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
