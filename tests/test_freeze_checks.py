"""The freeze covers what decides a verdict and --recompute checks what it claims (issue
reliability round 6): a tampered verdict, a claim declared anew since its verdict, a hand-edited
frozen.json and a freeze that lost its file are each caught, never "identical"."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import analysis.findings as findings
from analysis.findings import FINDINGS
from analysis.findings.declare import claim_hash
from experiments import registry, reproduce
from tests.conftest import ROOT
from tests.helpers import f2_runs

PUBLISHED = ROOT / "docs" / "findings"


@pytest.fixture
def frozen_file(tmp_path: Path, monkeypatch) -> Path:
    path = tmp_path / "frozen.json"
    monkeypatch.setattr(findings, "FROZEN", path)
    monkeypatch.setattr(registry, "FROZEN", path)
    return path


def published(tmp_path: Path, name: str) -> Path:
    shutil.copytree(PUBLISHED / name, tmp_path / name)
    return tmp_path / name


@pytest.fixture
def as_frozen(monkeypatch) -> None:
    """The checkout's own frozen.json, which the published verdicts were decided under."""
    monkeypatch.setattr(findings, "FROZEN", ROOT / "analysis" / "findings" / "frozen.json")


def test_a_flipped_verdict_with_its_hash_zeroed_is_different(tmp_path, capsys, as_frozen) -> None:
    f5 = published(tmp_path, "f5")
    assert reproduce.main(["--recompute", str(f5)]) == 0
    record = json.loads((f5 / "verdict.json").read_text())
    claim = record["claims"][0]
    claim["status"] = "PASS" if claim["status"] != "PASS" else "FAIL"
    claim["hash"] = "0" * 16
    (f5 / "verdict.json").write_text(json.dumps(record))
    assert reproduce.main(["--recompute", str(f5)]) == 1
    said = capsys.readouterr().out
    assert "DIFFERENT (F5)" in said and "identical" not in said.splitlines()[-1]


def test_a_claim_changed_in_the_registry_since_its_verdict_is_different(
    tmp_path, monkeypatch, capsys, as_frozen
) -> None:
    f5 = published(tmp_path, "f5")
    (claim,) = FINDINGS["f5"].claims
    part = dataclasses.replace(claim.parts[-1], margin=claim.parts[-1].margin + 0.01)
    changed = dataclasses.replace(claim, parts=(*claim.parts[:-1], part))
    moved = dataclasses.replace(FINDINGS["f5"], claims=(changed,))
    monkeypatch.setitem(FINDINGS, "f5", moved)
    assert reproduce.main(["--recompute", str(f5)]) == 1
    assert "F5: the declaration's hash differs" in capsys.readouterr().out


def test_a_hand_edited_frozen_json_is_named(frozen_file, tmp_path, capsys) -> None:
    assert reproduce.main(["--freeze"]) == 0
    assert registry.freeze_problems() == []
    record = json.loads(frozen_file.read_text())
    record["claims"]["F1a"]["hash"] = "0123456789abcdef"  # as if F1a's margin had moved
    frozen_file.write_text(json.dumps(record))
    problems = registry.freeze_problems()
    assert any("registry" in p and "edited by hand" in p for p in problems)
    assert any(p.startswith("F1a is declared anew since its freeze") for p in problems)
    assert reproduce.main(["--recompute", str(published(tmp_path, "f1"))]) == 1
    assert "error: frozen.json's registry" in capsys.readouterr().out


def test_a_freeze_without_frozen_json_never_reissues_a_published_verdicts_seeds(
    frozen_file,
) -> None:
    used = [
        r["seed"]
        for path in PUBLISHED.glob("*/verdict.json")
        for r in json.loads(path.read_text()).get("table", {}).get("rows", [])
    ]
    assert reproduce.main(["--freeze", "f8"]) == 0
    first = json.loads(frozen_file.read_text())["claims"]["F8a"]["first_seed"]
    assert first > max(used) and first % 1000 == 0
    assert json.loads(frozen_file.read_text())["claims"]["F8a"]["hash"] == claim_hash(
        FINDINGS["f8"].claims[0]
    )


def test_overrides_that_change_the_frozen_experiment_make_it_exploratory(
    frozen_file, tmp_path, monkeypatch, capsys
) -> None:
    """F2 frozen; `reproduce f2 optim.lr=1e-3 seed=0,1` runs what the command says (seeds 0
    and 1, not the fresh ones), records it as run, and decides nothing as confirmatory."""
    monkeypatch.setattr(registry, "PUBLISHED", tmp_path / "none")
    assert reproduce.main(["--freeze", "f2"]) == 0
    experiment = FINDINGS["f2"].experiment
    assert json.loads(frozen_file.read_text())["configs"][experiment] == registry.config_hash(
        experiment
    )
    assert registry.unfrozen_runs("f2", experiment, []) is None
    assert registry.unfrozen_runs("f2", experiment, ["num_threads=1"]) is None  # operational
    small = ["optim.lr=1e-3", "seed=0,1"]
    why = registry.unfrozen_runs("f2", experiment, small)
    assert why == "the command's overrides (optim.lr=1e-3 seed=0,1) change what the frozen "\
        "experiment runs"  # fmt: skip
    out = tmp_path / "f2"
    f2_runs(out, small)
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    assert reproduce.main(["f2", "--out", str(out), *small]) == 0
    record = json.loads((out / "verdict.json").read_text())
    assert record["exploratory"] == why and {c["mode"] for c in record["claims"]} == {
        "exploratory"}  # fmt: skip
    assert {r["seed"] for r in record["table"]["rows"]} == {0, 1}
    assert "**Exploratory**: the command's overrides" in (out / "verdict.md").read_text()
    assert reproduce.main(["--recompute", str(out)]) == 0  # decided again as it was recorded
    record = json.loads(frozen_file.read_text())
    record["configs"][experiment] = "0" * 16  # as if the yaml had changed since
    frozen_file.write_text(json.dumps(record))
    assert "changed since the freeze" in registry.unfrozen_runs("f2", experiment, [])


def test_a_setting_added_at_null_leaves_the_frozen_hash_and_a_value_moves_it(monkeypatch) -> None:
    """A feature added after a freeze with a null default (off) is not what the frozen runs
    differ by: the deciding config leaves null settings out, so the hash holds; setting it does
    change what runs, and the hash."""
    experiment = FINDINGS["f2"].experiment
    before = registry.config_hash(experiment)
    plain = registry.deciding_config(experiment)
    assert all(v is not None for v in plain.values())
    assert registry.config_hash(experiment, ["+model.new_feature=null"]) == before
    assert registry.config_hash(experiment, ["+model.new_feature=0.3"]) != before
