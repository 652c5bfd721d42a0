"""The docs stay true: every train.py command in README.md and docs/ composes, and every file
path they link to exists."""

from __future__ import annotations

import itertools
import re
import shlex

import pytest

from tests.conftest import ROOT
from training.launch import preflight

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"(?:^|\$ |`)python (?:train\.py|-m scripts\.init_probe)((?: [^`#\n]*)?)")


def commands() -> list[tuple[str, list[str]]]:
    """(where, overrides) for each train.py command line in the docs (comments dropped)."""
    found = []
    for path in DOCS:
        for line in path.read_text().splitlines():
            for match in COMMAND.finditer(line.strip()):
                args = shlex.split(match.group(1).replace("\\", ""))
                args = [a for a in args if not a.startswith("<")]
                if any("<" in a or "..." in a for a in args):
                    continue  # a template such as data.path=<dir>
                found.append((f"{path.relative_to(ROOT)}: {line.strip()[:60]}", args))
    return found


@pytest.mark.parametrize("where,args", commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_documented_commands_compose(where, args, compose_cfg):
    """A sweep's command line passes the preflight whole (an arm's key becomes ``++``), and its
    first job composes."""
    args = preflight(args) if "-m" in args else args
    single = [a.split(",")[0] if "=" in a and "[" not in a else a for a in args if a != "-m"]
    single = [a for a in single if not a.startswith(("hydra/launcher=", "hydra.launcher."))]
    if "-m" not in args:
        preflight(single)
    compose_cfg(single)


def test_the_documented_thresholds_and_probe_intervals_are_the_registries():
    """docs/usage.md's tables of the card's thresholds and the probes' intervals, row by row
    against analysis/cards.py's CROSSINGS and training/probe_config.py's PROBES."""
    from analysis.cards import CROSSINGS
    from training.probe_config import PROBES

    text = (ROOT / "docs" / "usage.md").read_text()
    for c in CROSSINGS:
        event = c.event.replace("|", "\\|")
        assert f"| {event} | {c.pattern} | {c.rule} {c.threshold:g} |" in text, c.event
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (yes|no) \|$", text, re.M)
    assert {n: (int(k), on == "yes") for n, k, on in rows} == {
        n: (p.every, p.default_on) for n, p in PROBES.items()}  # fmt: skip


def test_linked_files_exist():
    missing = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
            if "://" not in target and not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not missing, missing


TOP = "analysis|conf|data|docs|experiments|models|runs|scripts|tests|training"
CITED_PATH = re.compile(rf"`((?:{TOP})/[\w/.-]*\w\.(?:py|md|yaml|sh|json))`")
CITED_TEST = re.compile(r"`(test_\w+)`")


def test_cited_paths_and_tests_exist():
    """A module, doc or test named in backticks (`training/task.py`, `test_...`) exists: a move
    or a rename that leaves a doc pointing at nothing fails here."""
    tests = "".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    defined = set(re.findall(r"def (test_\w+)", tests))
    missing = []
    for path in [*DOCS, ROOT / "CONTRIBUTING.md"]:
        text = path.read_text()
        missing += [f"{path.relative_to(ROOT)} -> {p}" for p in CITED_PATH.findall(text)
                    if not (ROOT / p).exists()]  # fmt: skip
        missing += [f"{path.relative_to(ROOT)} -> {t}" for t in CITED_TEST.findall(text)
                    if t not in defined]  # fmt: skip
    assert not missing, missing


def python_blocks() -> list[tuple[str, str]]:
    """(where, code) for each ```python block of README.md and docs/."""
    found = []
    for path in DOCS:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            found.append((f"{path.relative_to(ROOT)} block {i + 1}", block))
    return found


@pytest.mark.parametrize("where,code", python_blocks(), ids=lambda v: v if "\n" not in v else "")
def test_documented_python_runs_as_pasted(where, code):
    exec(compile(code, where, "exec"), {"__name__": "__doc_snippet__"})


def table_names(text: str, header: str) -> list[str]:
    """The first column's `names` of the markdown table under ``header``."""
    lines = text.split(header, 1)[1].splitlines()[2:]
    rows = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines)]
    return [row.split("|")[1].split("`")[1] for row in rows]  # the first `code` of the cell


def test_usage_lists_every_placement_and_norm_of_the_registries() -> None:
    """docs/usage.md's placement and norm tables name what models/ registers, in its order: a
    new norm or placement without its row fails here, as does a row for one that left."""
    from models.catalog import NORMS
    from models.placement import PLACEMENTS

    text = (ROOT / "docs" / "usage.md").read_text()
    assert table_names(text, "| norm (`norm=`)") == list(NORMS)
    listed = table_names(text, "| placement (`placement=`)")
    assert sorted(listed) == sorted(PLACEMENTS), set(listed) ^ set(PLACEMENTS)
