"""No doc can state a verdict its finding's verdict.json does not hold. The status table of
docs/findings/README.md and each finding README's registry section are written from the files
(scripts/findings_docs.py; ``--check`` fails when one is out of date); everywhere else a verdict
word is either absent (README.md and docs/*.md name no claim's verdict or count) or checked here:
in each finding README's own text above its registry section, every "<claim> <VERDICT>", every
table row that ends in one, and every count ("1 PASS, 2 FAIL") must be the file's."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from analysis.findings import FINDINGS
from scripts import findings_docs
from tests.conftest import ROOT

WORDS = r"(PASS|FAIL|INCONCLUSIVE|NOT TESTABLE)"
COUNTS = re.compile(rf"(?:\d+\s+{WORDS}(?:,\s+|\s+and\s+|,?\s+Holm|\b))+")
IDS = sorted({c.id for f in FINDINGS.values() for c in f.claims}, key=len, reverse=True)
CLAIM_WORD = re.compile(rf"\b({'|'.join(IDS)})\b\)?:? \*{{0,2}}{WORDS}(?:e?s)?\b")
DOCS = ROOT / "docs"


def outside_generated(text: str) -> str:
    for begin, end in ((findings_docs.BEGIN, findings_docs.END), findings_docs.STATUS):
        while begin in text and end in text:
            head, rest = text.split(begin, 1)
            text = head + rest.split(end, 1)[1]
    return text


def published(name: str) -> dict:
    return json.loads((DOCS / "findings" / name / "verdict.json").read_text())


def test_every_generated_section_matches_the_files() -> None:
    assert findings_docs.main(["--check"]) == 0


def stated_counts(text: str) -> list[Counter]:
    out = []
    for match in COUNTS.finditer(text):
        found = Counter()
        for n, word in re.findall(rf"(\d+)\s+{WORDS}", match.group(0)):
            found[word] += int(n)
        out.append(found)
    return out


@pytest.mark.parametrize(
    "path",
    [ROOT / "README.md", *sorted(DOCS.glob("*.md")), DOCS / "findings" / "README.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_guides_state_no_verdict_by_hand(path) -> None:
    text = outside_generated(path.read_text())
    assert not stated_counts(text), f"{path}: verdict counts by hand; link the status table"
    assert not CLAIM_WORD.findall(text), f"{path}: a claim's verdict by hand; link its README"


def finding_dirs() -> list[str]:
    return [n for n in FINDINGS if (DOCS / "findings" / n / "verdict.json").is_file()]


@pytest.mark.parametrize("name", finding_dirs())
def test_each_finding_readme_states_its_files_verdicts(name) -> None:
    readme = (DOCS / "findings" / name / "README.md").read_text()
    own = readme.split(findings_docs.BEGIN, 1)[0]  # above it: the README's own (current) text
    claims = published(name)["claims"]
    words = {c["id"]: {c["status"], c["holm_status"]} for c in claims}
    counted = [c for c in claims if c["counted"]]
    allowed = [Counter(c[k] for c in counted) for k in ("status", "holm_status")]
    for claim, word in CLAIM_WORD.findall(own):
        if claim in words:
            assert word in words[claim], f"{name}: '{claim} {word}' but the file has {words[claim]}"
    for line in own.splitlines():
        cells = [c.strip(" *") for c in line.strip().strip("|").split("|")]
        first = cells[0].split(" ")[0] if cells else ""
        if line.startswith("|") and first in words and re.fullmatch(WORDS, cells[-1]):
            assert cells[-1] in words[first], f"{name}: row {first} says {cells[-1]}"
    for found in stated_counts(own):
        assert found in allowed, f"{name}: counts {dict(found)}, the file's {allowed}"
    if "Holm the same" in own:
        assert allowed[0] == allowed[1], f"{name}: 'Holm the same', the file's {allowed}"
    modes = {c["mode"] for c in counted}
    if "**confirmatory**" in own.split("\n\n", 2)[1]:  # the status line under the title
        assert modes == {"confirmatory"}, f"{name}: says confirmatory, the file has {modes}"


def test_the_check_finds_a_stale_word() -> None:
    """The checks above are live: a wrong verdict and a wrong count are both caught."""
    assert CLAIM_WORD.findall("so F14e PASSes at last") == [("F14e", "PASS")]
    assert stated_counts("Status: 1 PASS, 2 FAIL, Holm the same") == [
        Counter({"PASS": 1, "FAIL": 2})
    ]
    assert not stated_counts("the verdicts PASS, FAIL and INCONCLUSIVE")
