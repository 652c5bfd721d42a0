"""Each finding's README section written from its declarations (analysis/findings/registry.py),
its published verdict.json and the ledger (docs/findings/ledger.json):

    python -m scripts.findings_docs [--check]

The section sits between two markers near the top of docs/findings/<id>/README.md: the claims
as declared (rule, departures, seeds per arm), each one's published verdict marked confirmatory
or exploratory, and the claim's ledger (every change of its rule: commit, date, old and new
rule, the verdict before and after). ``--check`` writes nothing and exits 1 when a README is
out of date (the tests run it).
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json

from analysis.findings import FINDINGS, hash_now
from analysis.findings.declare import Claim, claim_hash, rule_text

DOCS = Path(__file__).resolve().parents[1] / "docs" / "findings"
BEGIN = (
    "<!-- registry: written by `python -m scripts.findings_docs`; edit the registry, not this -->"
)
END = "<!-- end of the registry's section -->"


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def published(name: str) -> dict[str, dict]:
    path = DOCS / name / "verdict.json"
    record = json.loads(path.read_text()) if path.is_file() else {"claims": []}
    return {c["id"]: c for c in record["claims"]}


def verdict_of(claim: Claim, found: dict[str, dict]) -> str:
    v = found.get(claim.id)
    if v is None:
        return "not run yet"
    if v.get("hash") != claim_hash(claim):  # decided under another rule: a pilot
        return f"pilot under an earlier rule: {v['status']} (exploratory)"
    return f"{v['status']} (Holm {v['holm_status']}; {v['mode']})"


def section(name: str, ledger: list[dict]) -> str:
    finding, found = FINDINGS[name], published(name)
    lines = [
        BEGIN,
        "",
        f"## Claims as declared (registry {hash_now()})",
        "",
        "| claim | statement (source) | rule | departs from the paper | published verdict |",
        "|---|---|---|---|---|",
    ]
    for c in finding.claims:
        what = f"{c.statement} ({c.source})" + ("" if c.counted else " [a check, not counted]")
        row = [c.id, what, rule_text(c), c.departs or "–", verdict_of(c, found)]
        lines.append("| " + " | ".join(cell(x) for x in row) + " |")
    ids = {c.id for c in finding.claims} | ({"F6d"} if name == "f6" else set())
    entries = [e for e in ledger if e["claim"] in ids]
    if entries:
        lines += [
            "",
            "### Ledger: every change to these claims' rules, with the verdict before and after",
            "",
            "| claim | commit | date | old rule | new rule | before | after | same data | note |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for e in sorted(entries, key=lambda e: (e["claim"], e["date"])):
            row = [e["claim"], e["commit"], e["date"], e["old_rule"], e["new_rule"], e["before"],
                   e["after"], "yes" if e["same_data"] else "no", e["note"]]  # fmt: skip
            lines.append("| " + " | ".join(cell(x) for x in row) + " |")
    lines += [
        "",
        "Everything below this section is the pilot (exploratory): the runs as they were made and "
        "described then, under the rules the ledger's old-rule column gives.",
    ]
    return "\n".join([*lines, "", END])


def with_section(text: str, block: str) -> str:
    """The README with its section replaced, or put after its title when it has none."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + block + rest.split(END, 1)[1]
    title, _, body = text.partition("\n")
    return f"{title}\n\n{block}\n{body}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.findings_docs", description=__doc__)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when out of date")
    args = p.parse_args(argv)
    ledger = json.loads((DOCS / "ledger.json").read_text())["entries"]
    stale = []
    for name in FINDINGS:
        readme = DOCS / name / "README.md"
        text = readme.read_text()
        new = with_section(text, section(name, ledger))
        if new != text:
            stale.append(str(readme))
            if not args.check:
                readme.write_text(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python -m scripts.findings_docs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
