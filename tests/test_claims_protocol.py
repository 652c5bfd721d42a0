"""A user's claim through the findings' protocol on real tiny runs: pilot -> freeze (hash, fresh
seeds) -> confirm (the fresh seeds launched once, into the same sweep dir) -> decided once on
those seeds alone, confirmatory; a second freeze is refused, a second confirm runs nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runs.errors import ConfigError
from scripts import compare
from tests.conftest import ROOT, TINY_RUN

pytestmark = pytest.mark.slow  # real runs, ~40 s; its fast version: tests/test_compare.py
CLAIMS = """claims:
  - id: hc_vs_plain
    statement: hyper-connections end below the plain sum
    arms: [model.connection=hc, model.connection=residual]
    side: below
    seeds: 2
"""


def test_freeze_then_confirm_decides_once_on_the_fresh_seeds(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "sweep"
    pilot = subprocess.run(
        [sys.executable, "train.py", "-m", *TINY_RUN, "logger=csv",
         "model.connection=residual,hc", "model.streams=2", "seed=0,1",
         f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert pilot.returncode == 0, pilot.stderr[-2000:]
    claims = tmp_path / "claims.yaml"
    claims.write_text(CLAIMS)
    args = [str(sweep), "--no-wandb", "--no-plots", "--claims", str(claims)]
    assert compare.main([*args, "--freeze"]) == 0
    frozen = json.loads((sweep / "claims.frozen.json").read_text())
    assert frozen["first_seed"] == 100 and frozen["seeds"] == 2  # past the pilot's seeds
    assert json.loads((sweep / "report" / "claims.json").read_text())["claims"][0]["mode"] == (
        "exploratory"
    )
    with pytest.raises(ConfigError, match="were frozen before"):
        compare.report_command([*args, "--freeze"])
    assert compare.main([*args, "--confirm"]) == 0
    fresh = sorted(p.name for p in sweep.glob("*seed=10[01]*"))
    assert len(fresh) == 4 and all("optim.lr" in name for name in fresh)
    (verdict,) = json.loads((sweep / "report" / "claims.json").read_text())["claims"]
    assert verdict["mode"] == "confirmatory" and verdict["decided_on"] == [100, 101]
    assert "launching:" in capsys.readouterr().out
    runs = sorted(sweep.rglob("summary.json"))
    assert compare.main([*args, "--confirm"]) == 0  # finished: skipped, decided the same
    assert sorted(sweep.rglob("summary.json")) == runs
    again = json.loads((sweep / "report" / "claims.json").read_text())["claims"][0]
    assert (again["status"], again["effects"]) == (verdict["status"], verdict["effects"])
