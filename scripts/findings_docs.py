"""Each finding's README section written from its declarations (analysis/findings/registry.py),
its published verdict.json and the ledger (docs/findings/ledger.json), and the status table of
every finding in docs/findings/README.md from the verdict.json files:

    python -m scripts.findings_docs [--check]

The section sits between two markers near the top of docs/findings/<id>/README.md: the claims
as declared (rule, departures, seeds per arm) under the finding's own hash, each one's published
verdict marked confirmatory or exploratory, and the claim's ledger (every change of its rule:
commit, date, old and new rule, the verdict before and after). The status table gives each
finding's counted verdicts, raw and Holm-adjusted, its mode, runs and time. ``--check`` writes
nothing and exits 1 when a file is out of date (the tests run it).
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import hashlib
import json
from collections import Counter

from analysis.findings import FINDINGS
from analysis.findings.declare import Claim, Finding, claim_hash, rule_text
from experiments.verdicts import counts, read_verdict

DOCS = Path(__file__).resolve().parents[1] / "docs" / "findings"
BEGIN = (
    "<!-- registry: written by `python -m scripts.findings_docs`; edit the registry, not this -->"
)
END = "<!-- end of the registry's section -->"
STATUS = (
    "<!-- status: written by `python -m scripts.findings_docs` from each verdict.json; "
    "not by hand -->",
    "<!-- end of the status table -->",
)


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def record_of(name: str) -> dict | None:
    return read_verdict(DOCS / name / "verdict.json")


def published(name: str) -> dict[str, dict]:
    return {c["id"]: c for c in (record_of(name) or {"claims": []})["claims"]}


def finding_hash(finding: Finding) -> str:
    """One hash of the finding's own claims: a change to another finding leaves it alone."""
    text = "".join(claim_hash(c) for c in finding.claims)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def mode_of(claims: list[dict]) -> str:
    found = Counter(c["mode"] for c in claims if c["counted"])
    if len(found) == 1:
        return f"**{next(iter(found))}**" if "confirmatory" in found else next(iter(found))
    return ", ".join(f"{n} {m}" for m, n in sorted(found.items()))


def status_table() -> str:
    """Every finding's published state, from its verdict.json alone."""
    lines = [
        STATUS[0],
        "",
        "| finding | verdicts (counted claims) | Holm within the finding | mode | runs | wall time "
        "(load average) |",
        "|---|---|---|---|---|---|",
    ]
    for name in FINDINGS:
        record = record_of(name)
        link = f"[{name}]({name}/README.md)"
        if record is None:
            lines.append(f"| {link} | not run yet | | | | |")
            continue
        claims = record["claims"]
        wall = (f"{record['wall_s'] / 60:.1f} min ({record['load_start']:.1f} -> "
                f"{record['load_end']:.1f})")  # fmt: skip
        row = [link, counts(claims, "status"), counts(claims, "holm_status"), mode_of(claims),
               str(record["n_runs"]), wall]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join([*lines, "", STATUS[1]])


def verdict_of(claim: Claim, found: dict[str, dict]) -> str:
    v = found.get(claim.id)
    if v is None:
        return "not run yet"
    if v.get("hash") != claim_hash(claim):  # decided under another rule: a pilot
        return f"pilot under an earlier rule: {v['status']} (exploratory)"
    before = f"; measured {v['before_gate']} before its gate" if v.get("before_gate") else ""
    return f"{v['status']} (Holm {v['holm_status']}; {v['mode']}{before})"


def section(name: str, ledger: list[dict]) -> str:
    finding, found = FINDINGS[name], published(name)
    lines = [
        BEGIN,
        "",
        f"## Claims as declared (hash {finding_hash(finding)})",
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


def with_section(text: str, block: str, markers: tuple[str, str] = (BEGIN, END)) -> str:
    """The file with its section replaced, or put after its title when it has none."""
    begin, end = markers
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
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
        if not readme.is_file():
            print(f"error: {readme} is missing; write its title line (# {name}: ...) and run "
                  "python -m scripts.findings_docs")  # fmt: skip
            return 1
        text = readme.read_text()
        new = with_section(text, section(name, ledger))
        if new != text:
            stale.append(str(readme))
            if not args.check:
                readme.write_text(new)
    index = DOCS / "README.md"
    text = index.read_text()
    new = with_section(text, status_table(), STATUS)
    if new != text:
        stale.append(str(index))
        if not args.check:
            index.write_text(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python -m scripts.findings_docs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
