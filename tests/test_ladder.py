"""The ladder (experiments/ladder.py, analysis/findings/trend.py): an effect's trend over sizes
as the inverse-variance weighted slope per doubling of parameters, checked on a hand-worked case
and by simulation against a known slope (its 95% interval covers the truth 95% of the time, and
a flat truth reads "rises" or "falls" at most 2.5% of the time each); a ratio's trend is a factor
per doubling; the rungs' effects are matched by claim and name; the CLI plans every rung."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from analysis.findings.trend import Z95, ladder_trends, rung_point, trend
from tests.conftest import ROOT

SIMS = 2000
SLACK = 3 * math.sqrt(0.05 * 0.95 / SIMS)


def effect(y: float, se: float, scale: str = "linear") -> dict:
    if scale == "log":
        return {"effect": math.exp(y), "lo": math.exp(y - Z95 * se), "hi": math.exp(y + Z95 * se),
                "scale": "log"}  # fmt: skip
    return {"effect": y, "lo": y - Z95 * se, "hi": y + Z95 * se, "scale": scale}


def test_the_slope_by_hand() -> None:
    # x = 10, 11, 12 (1K, 2K, 4K parameters), y = 1, 2, 3.5, one se of 0.1: ordinary least
    # squares, slope = (-1 x -7/6 + 1 x 4/3) / 2 = 1.25, its se = 0.1 / sqrt(2)
    points = [rung_point(2.0**x, effect(y, 0.1)) for x, y in ((10, 1.0), (11, 2.0), (12, 3.5))]
    t = trend(points)
    assert t["slope"] == pytest.approx(1.25)
    assert (t["lo"], t["hi"]) == pytest.approx(
        (1.25 - Z95 * 0.1 / 2**0.5, 1.25 + Z95 * 0.1 / 2**0.5)
    )
    assert t["trend"] == "rises" and t["fitted"] == 3
    # a precise rung weighs more: the middle one at se 0.01 pulls the fit through it
    tight = [(10.0, 1.0, 1.0), (11.0, 5.0, 0.01), (12.0, 3.0, 1.0)]
    assert trend(tight)["slope"] == pytest.approx(1.0)  # (-1 x -2 + 1 x 0) / 2 with ybar ~ 5
    assert trend(points[:2])["trend"] == "no trend shown"  # two rungs: no interval on a slope


def test_a_ratios_trend_is_a_factor_per_doubling() -> None:
    rungs = [
        rung_point(2.0**x, effect(math.log(1.5) * (x - 10), 0.05, "log")) for x in (10, 11, 12)
    ]
    t = trend(rungs, log=True)
    assert t["slope"] == pytest.approx(1.5) and t["lo"] < 1.5 < t["hi"] and t["scale"] == "log"


@pytest.mark.parametrize("truth", [0.0, 0.08])
def test_the_interval_covers_a_known_slope(truth: float) -> None:
    rng = random.Random(68 + int(truth * 100))
    covered = rises = falls = 0
    for _ in range(SIMS):
        points = []
        for x in (15.0, 16.0, 17.0, 18.0):
            se = rng.uniform(0.02, 0.1)
            points.append((x, 0.3 + truth * (x - 15) + rng.gauss(0, se), se))
        t = trend(points)
        covered += t["lo"] <= truth <= t["hi"]
        rises += t["trend"] == "rises"
        falls += t["trend"] == "falls"
    assert abs(covered / SIMS - 0.95) <= SLACK, covered / SIMS
    if truth == 0.0:
        assert rises / SIMS <= 0.025 + SLACK and falls / SIMS <= 0.025 + SLACK
    else:
        assert falls == 0 and rises / SIMS > 0.5  # a real rise is seen, never as a fall


def test_rungs_are_matched_by_claim_and_effect() -> None:
    def rung(size: float, y: float, with_b: bool = True) -> dict:
        effects = {"a": effect(y, 0.05), **({"b": effect(-y, 0.05)} if with_b else {})}
        return {"size": size, "claims": [{"id": "X1", "effects": effects}]}

    found = ladder_trends([rung(1e4, 0.1), rung(2e4, 0.2), rung(4e4, 0.3, with_b=False)])
    a, b = found
    assert (a["claim"], a["effect"], a["trend"]) == ("X1", "a", "rises")
    assert a["slope"] == pytest.approx(0.1) and len(a["rungs"]) == 3
    assert len(b["rungs"]) == 2 and b["trend"] == "no trend shown"  # one rung lacked it


def test_the_ladder_plans_every_rung_and_refuses_a_finding_without_one() -> None:
    def reproduce(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "scripts/reproduce.py", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    planned = reproduce("f5", "--ladder", "--dry-run")
    assert planned.returncode == 0, planned.stdout[-2000:] + planned.stderr[-2000:]
    sizes = ("model.n_embd=32", "model.n_embd=48", "the frozen size", "model.n_embd=96")
    for k, size in enumerate(sizes):
        assert f"rung {k}: {size}" in planned.stdout
    assert "ladder/rung3" in planned.stdout
    none = reproduce("f8", "--ladder", "--dry-run")
    assert none.returncode == 1 and "declares 0 ladder rungs" in none.stdout


def test_a_finished_ladder_is_summarized_drawn_and_published(tmp_path) -> None:
    import json

    from experiments import ladder

    base = tmp_path / "ladder"
    rungs = [["model.n_embd=32"], [], ["model.n_embd=128"]]
    for k, (params, y) in enumerate(((56_000, 0.02), (210_000, 0.03), (814_000, 0.05))):
        claims = [{"id": "F5", "effects": {"rmsnorm - layernorm": effect(y, 0.004)}}]
        (base / f"rung{k}" / "run").mkdir(parents=True)
        (base / f"rung{k}" / "verdict.json").write_text(json.dumps({"claims": claims}))
        summary = {"params": params, "steps": 500, "status": "completed"}
        (base / f"rung{k}" / "run" / "summary.json").write_text(json.dumps(summary))
    record = ladder.summarize("f5", "f5_norms", base, rungs)
    ladder.write(base, record)
    (t,) = record["trends"]
    assert t["trend"] == "rises" and [r["size"] for r in record["rungs"]] == [56_000, 210_000,
                                                                            814_000]  # fmt: skip
    text = (base / "ladder.md").read_text()
    assert "| 2 | model.n_embd=128 | 814,000 | 500 |" in text and "| F5 | rmsnorm" in text
    assert (base / "ladder.png").stat().st_size > 1000
    ladder.publish(base, tmp_path / "docs" / "ladder", "f5", 3)
    assert json.loads((tmp_path / "docs/ladder/rung2/verdict.json").read_text())["claims"]
