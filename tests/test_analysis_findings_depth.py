"""Warmup and depth claims (analysis/findings/depth.py) on report.json pieces with known
numbers: F2, F3/F4, the ViT study, the early model update, the placement study."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from analysis.findings import NoData, Verdict, decide_finding
from analysis.findings.common import confirm_at, variant
from analysis.findings.depth import post_update_jumps
from analysis.findings.settings import ReproduceConfig
from models.placement import PLACEMENTS
from tests.reports import by_id, depth_report, row


def status(verdicts: list, claim: str) -> str:
    return next(v.status for v in verdicts if v.id == claim)


def f2_report(post_off: list, post_on: list, pre_off: list, pre_on: list) -> dict:
    rows = []
    for placement, off, on in (("post", post_off, post_on), ("pre", pre_off, pre_on)):
        rows.append(row(off, placement=placement, lr=1e-3, warmup_steps=0))
        rows.append(row(on, placement=placement, lr=1e-3, warmup_steps=100))
        rows.append(row([3.0, 3.0], placement=placement, lr=3e-3, warmup_steps=0))
        rows.append(row([3.0, 3.0], placement=placement, lr=3e-3, warmup_steps=100))
    return {"variants": rows}


def test_f2_pass_and_fail() -> None:
    settings = ReproduceConfig(ref_lr=1e-3)
    good = decide_finding(
        "f2", f2_report([3.0, 3.1], [2.5, 2.6], [2.52, 2.5, 2.51], [2.5, 2.5, 2.51]), settings
    )
    assert [v.status for v in good] == ["PASS", "PASS"]
    f2a = good[0]
    assert f2a.intervals["gap"]["effect"] == pytest.approx(0.5)
    assert f2a.measured["post_no_warmup"] == pytest.approx(3.05)
    # Welch: sds 0.0707 each, se 0.0707, df 2: 0.5 ± 4.303 * 0.0707 = [0.196, 0.804]
    assert f2a.intervals["gap"]["lo"] == pytest.approx(0.5 - 4.3027 * 0.070711, abs=1e-3)
    # Two seeds each 0.01 apart: the interval (t with 1 df) cannot tell 0.01 from 0.05.
    loose = decide_finding(
        "f2", f2_report([3.0, 3.1], [2.5, 2.6], [2.52, 2.5], [2.5, 2.5]), settings
    )
    assert loose[1].status == "INCONCLUSIVE" and "seeds per arm" in loose[1].note
    # The gap is 0.09 < 0.10; Pre-LN without warmup 0.08 worse > 0.05.
    bad = decide_finding(
        "f2", f2_report([2.64, 2.64], [2.55, 2.55], [2.58, 2.58], [2.5, 2.5]), settings
    )
    assert [v.status for v in bad] == ["FAIL", "FAIL"]
    # A diverged seed makes Post-LN without warmup worse than anything that trained.
    diverged = decide_finding(
        "f2", f2_report([None, 2.6], [2.55, 2.55], [2.5], [2.5, 2.5]), settings
    )
    assert status(diverged, "F2a") == "PASS" and status(diverged, "F2b") == "NO DATA"
    assert status(decide_finding("f2", f2_report([3], [2], [2], [2])), "F2a") == "NO DATA"


def test_depth_claims_pass_and_fail() -> None:
    healthy = {("pre", 3): [2.6, 2.6, 2.61], ("deepnorm", 3): [2.5, 2.5, 2.51]}
    good = depth_report(
        {
            **healthy,
            ("post", 3): [2.52, 2.53, 2.54],
            ("post", 24): [3.2, None],
            ("pre", 24): [2.75, 2.76, 2.77],
            ("deepnorm", 24): [2.5, 2.52, 2.54],
        },
        warmup_steps=50,
    )
    verdicts = decide_finding("f3", good, ReproduceConfig(max_steps=200))
    assert {v.id: v.status for v in verdicts} == {
        "F3a": "PASS",
        "F3b": "PASS",
        "F3c": "NO DATA",  # no metrics.csv with update/model
        "F4": "PASS",
    }
    bad = depth_report(
        {
            **healthy,
            ("post", 3): [2.7, 2.7],  # F4: 0.1 above Pre-LN
            ("post", 24): [2.85, 2.85],  # F3a: only 0.1 above the best
            ("pre", 24): [3.0, 3.0],  # F3b: 0.4 above its shallow self
            ("deepnorm", 24): [2.75, 2.75],
        },
        warmup_steps=50,
    )
    verdicts = decide_finding("f3", bad, ReproduceConfig(max_steps=200))
    assert [status(verdicts, c) for c in ("F3a", "F3b", "F4")] == ["FAIL", "FAIL", "FAIL"]
    assert status(decide_finding("vit", bad), "V1") == "FAIL"


def test_update_claim_reads_metrics(tmp_path: Path) -> None:
    def run(name: str, peak: float) -> dict:
        path = tmp_path / name
        path.mkdir()
        rows = ["step,update/model"] + [f"{s},{peak * min(s, 20) / 20}" for s in range(101)]
        (path / "metrics.csv").write_text("\n".join(rows) + "\n")
        return {"run_dir": str(path), "status": "completed", "best_val_loss": 2.5}

    def variant(placement: str, peak: float) -> dict:
        runs = [run(f"{placement}-{peak}-{i}", peak) for i in range(2)]
        return {"label": placement, "params": {"placement": placement, "n_layer": 12}, "runs": runs}

    report = {"variants": [variant("post", 6.0), variant("deepnorm", 2.0)]}
    with pytest.raises(AttributeError, match="margin 'update_ratio' is not declared"):
        post_update_jumps(report, ReproduceConfig(max_steps=200), Verdict("x", "", ""))
    margins = {"update_ratio": 2.0}  # F3c's registry entry
    v = post_update_jumps(
        report, ReproduceConfig(max_steps=200), Verdict("x", "", "", margins=margins)
    )
    # Early window: steps 1..10 (5% of 200); mean of peak * s / 20 = peak * 5.5 / 20.
    ratio = v.intervals["post / deepnorm"]
    assert v.status == "PASS" and ratio["effect"] == pytest.approx(3.0) and ratio["n"] == [2, 2]
    assert v.measured["post"] == pytest.approx(6.0 * 5.5 / 20)
    report["variants"][1] = variant("deepnorm", 4.0)
    v = post_update_jumps(
        report, ReproduceConfig(max_steps=200), Verdict("x", "", "", margins=margins)
    )
    assert v.status == "FAIL" and v.intervals["post / deepnorm"]["effect"] == pytest.approx(1.5)
    with pytest.raises(NoData):  # window 1..0: nothing logged there
        post_update_jumps(
            report, ReproduceConfig(max_steps=10), Verdict("x", "", "", margins=margins)
        )


def test_an_update_arm_with_warmup_beside_a_grid_without(tmp_path: Path) -> None:
    """The ViT's V3 arm: 12-layer Post-LN and DeepNorm warmed up at V3's rate beside the grid
    without warmup. V1 reads the grid (reproduce.baseline pins warmup_steps at 0), V3 the arm
    (reproduce.update_arm), and the confirming launches leave the arm alone."""

    def runs(name: str, peak: float, seeds: list[int]) -> list[dict]:
        out = []
        for seed in seeds:
            path = tmp_path / f"{name}-{seed}"
            path.mkdir()
            rows = ["step,update/model"] + [f"{s},{peak}" for s in range(1, 11)]
            (path / "metrics.csv").write_text("\n".join(rows) + "\n")
            out.append({"run_dir": str(path), "seed": seed, "status": "completed",
                        "best_val_loss": 1.0})  # fmt: skip
        return out

    grid = depth_report(
        {("post", 12): [0.9, 0.9], ("pre", 12): [0.4, 0.4], ("deepnorm", 12): [0.2, 0.2]},
        lr=3e-3,
        warmup_steps=0,
    )["variants"]
    grid += depth_report(
        {("post", 12): [1.5, 1.5], ("pre", 12): [0.5, 0.5], ("deepnorm", 12): [0.3, 0.3]},
        lr=1e-3,
        warmup_steps=0,
    )["variants"]
    arm = [
        {"label": p, "params": {"placement": p, "n_layer": 12, "lr": 3e-3, "warmup_steps": 20},
         "runs": runs(p, peak, [0, 1, 2, 3, 4])}
        for p, peak in (("post", 6.0), ("deepnorm", 1.0))
    ]  # fmt: skip
    report = {"variants": grid + arm}
    settings = ReproduceConfig(
        max_steps=200, lr=3e-3, baseline={"warmup_steps": 0}, update_arm={"warmup_steps": 20}
    )
    v1, _, v3 = decide_finding("vit", report, settings)
    assert v1.status == "PASS" and v1.measured["post"] == pytest.approx(0.9)
    assert v1.measured["best_lr"] == {"post-L12": 3e-3, "pre-L12": 3e-3, "deepnorm-L12": 3e-3}
    assert v3.intervals["post / deepnorm"]["n"] == [5, 5]
    assert v3.intervals["post / deepnorm"]["effect"] == pytest.approx(6.0)
    # Without the baseline the grid's 3e-3 rows and the arm's collide: no single row to read.
    assert (
        decide_finding("vit", report, dataclasses.replace(settings, baseline={}))[0].status
        == "NO DATA"
    )
    assert confirm_at(report, ["placement", "n_layer"], [100], {"warmup_steps": 0}) == [
        {"placement": p, "n_layer": 12, "lr": 3e-3} for p in ("deepnorm", "post", "pre")
    ]
    assert confirm_at(report, ["placement", "n_layer"], [100]) == [  # the same collision
        {"placement": "pre", "n_layer": 12, "lr": 3e-3}
    ]


def league_report(tmp: Path, curves: dict[str, dict[float, list]], unigram: float) -> dict:
    """The league's shape: one depth (12), placements x lrs; every run's summary.json records
    the data's unigram loss."""
    rows = []
    for placement, by_lr in curves.items():
        for lr, losses in by_lr.items():
            r = row(losses, placement=placement, n_layer=12, lr=lr)
            for run in r["runs"]:
                path = tmp / f"{placement}-{lr}-{run['seed']}"
                path.mkdir(parents=True)
                (path / "summary.json").write_text(json.dumps({"unigram_loss": unigram}))
                run["run_dir"] = str(path)
            rows.append(r)
    return {"variants": rows}


def test_league_ranks_each_placement_at_its_best_lr(tmp_path: Path) -> None:
    trains = {3e-4: [2.9, 2.9], 1e-3: [2.6, 2.62], 3e-3: [2.7, 2.7], 1e-2: [None, 3.0]}
    curves = {p: trains for p in PLACEMENTS} | {
        "post": {3e-4: [3.1, 3.1], 1e-3: [3.25, 3.26], 3e-3: [3.26, 3.26], 1e-2: [None, None]},
        "ngpt": {3e-4: [3.2, 3.2], 1e-3: [3.0, 3.0], 3e-3: [2.8, 2.8], 1e-2: [2.5, 2.52]},
        "admin": {3e-4: [3.0, 3.0], 1e-3: [3.05, 3.0], 3e-3: [3.1, 3.1], 1e-2: [3.2, 3.2]},
    }
    v = by_id(decide_finding("placements", league_report(tmp_path, curves, unigram=3.26)))
    assert {k: x.status for k, x in v.items()} == {
        **dict.fromkeys(("P1", "P2", "P3", "P4", "P6", "P7"), "PASS"),
        "P5": "FAIL",  # Admin's best (3.0 at 3e-4) is 0.26 below the unigram loss: < 0.3
    }
    # Post-LN at its best lr (3e-4: 3.1), Pre-LN and DeepNorm at theirs (1e-3: 2.61).
    assert v["P1"].measured["post"] == pytest.approx(3.1)
    assert v["P1"].intervals["post - pre"]["effect"] == pytest.approx(3.1 - 2.61)
    assert v["P1"].measured["best_lr"] == {"post-L12": 3e-4, "pre-L12": 1e-3, "deepnorm-L12": 1e-3}
    assert "post-L12 (0.0003 of 0.0003..0.01)" in v["P1"].note  # its best is the smallest lr
    assert v["P7"].measured["loss"] == pytest.approx(2.51)  # nGPT at 1e-2, an edge too
    assert v["P7"].intervals["unigram - loss"]["effect"] == pytest.approx(3.26 - 2.51)
    assert "ngpt-L12 (0.01 of 0.0003..0.01)" in v["P7"].note
    assert v["P2"].note == ""  # Pre-LN's best lies inside the grid


def test_a_fixed_rate_claim_pins_its_lr() -> None:
    report = {
        "variants": [
            row([2.5, 2.5], placement="pre", lr=1e-3),
            row([2.4, 2.4], placement="pre", lr=3e-3),
            row([None, 2.3], placement="pre", lr=1e-2),  # a diverged seed: +inf, never best
        ]
    }
    assert variant(report, placement="pre")["params"]["lr"] == 3e-3
    assert report["chosen_lrs"]["pre"]["edge"] is False
    assert variant(report, placement="pre", lr=1e-3)["params"]["lr"] == 1e-3


def test_placement_claims_pass_and_fail() -> None:
    shallow = {(p, 4): [2.75, 2.75] for p in PLACEMENTS}
    good = depth_report(
        shallow
        | {
            ("post", 12): [3.25, 3.26],
            ("pre", 12): [2.9, 2.9],
            ("deepnorm", 12): [2.72, 2.72],
            ("sandwich", 12): [2.8, 2.8],
            ("admin", 12): [2.7, 2.71],
        }
    )
    v = by_id(decide_finding("placements", good))
    claims = ("P1", "P2", "P3", "P4", "P5")
    assert {k: v[k].status for k in claims} == dict.fromkeys(claims, "PASS")
    assert v["P2"].intervals["deepest - shallowest"]["effect"] == pytest.approx(0.15)
    assert v["P1"].intervals["post - deepnorm"]["effect"] == pytest.approx(3.255 - 2.72)
    # Admin 0.0 above its shallow self, but its two seeds 0.1 apart: no verdict either way.
    noisy = by_id(decide_finding("placements", depth_report(shallow | {("admin", 12): [2.7, 2.8]})))
    assert noisy["P5"].status == "INCONCLUSIVE"

    bad = depth_report(
        shallow
        | {
            ("post", 12): [2.8, 2.8],  # within 0.2 of the best: Post-LN did not fail
            ("pre", 12): [2.9, 2.9],
            ("deepnorm", 12): [3.1, 3.1],  # 0.35 above its 4-layer self
            ("sandwich", 12): [2.8, None],  # a diverged seed
            ("admin", 12): [3.1, 3.1],
        }
    )
    v = by_id(decide_finding("placements", bad))
    assert [v[c].status for c in claims] == ["FAIL", "PASS", "FAIL", "FAIL", "FAIL"]
    assert v["P4"].measured["deepest"] == "inf (diverged)"
    one_depth = depth_report(shallow)  # one depth and no summary.json: no unigram loss
    assert by_id(decide_finding("placements", one_depth))["P2"].status == "NO DATA"
