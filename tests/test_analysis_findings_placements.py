"""F9 and F11 claims (analysis/findings/placements.py) on report.json pieces and
metrics.csv files with known numbers, and the block profile F9 reads from the probes' columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.block_profile import last_profile, plot_profiles
from analysis.findings import decide_finding
from tests.reports import by_id, depth_report


# ---------------------------------------------------------------- the block profile
def write_metrics(path: Path, rows: dict[int, dict[str, float]]) -> None:
    """A metrics.csv as Lightning's CSVLogger writes it: one sparse row per step."""
    columns = sorted({k for row in rows.values() for k in row})
    lines = [",".join(["step", *columns])]
    for step, row in sorted(rows.items()):
        lines.append(",".join([str(step), *(str(row.get(c, "")) for c in columns)]))
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.csv").write_text("\n".join(lines) + "\n")


def probed(profile: dict[str, list[float]]) -> dict[str, float]:
    """One probe step's row: block_cos/layer_i and act_norm/layer_i of a profile."""
    row = {f"block_cos/layer_{i}": c for i, c in enumerate(profile["cos"])}
    return row | {f"act_norm/layer_{i}": r for i, r in enumerate(profile["rms"])}


def test_last_profile_reads_the_last_step_every_block_was_probed(tmp_path: Path) -> None:
    early, late = {"cos": [0.1, 0.2], "rms": [1.0, 2.0]}, {"cos": [0.3, 0.4], "rms": [3.0, 4.0]}
    partial = {"block_cos/layer_0": 0.9, "act_norm/layer_0": 9.0}  # layer 1 missing at step 40
    write_metrics(tmp_path / "run", {0: probed(early), 20: probed(late), 40: partial})
    assert last_profile(tmp_path / "run", 2) == {**late, "step": 20}
    write_metrics(tmp_path / "none", {0: {"train/loss": 3.0}})
    assert last_profile(tmp_path / "none", 2) is None


# ---------------------------------------------------------------- F9
def profiled_runs(tmp: Path, name: str, profiles: list[dict], losses: list[float]) -> list[dict]:
    runs = []
    for i, (profile, loss) in enumerate(zip(profiles, losses, strict=True)):
        path = tmp / f"{name}-{i}"
        write_metrics(path, {0: probed({"cos": [0.5] * 8, "rms": [1.0] * 8}), 180: probed(profile)})
        runs.append({"run_dir": str(path), "seed": i, "status": "completed", "best_val_loss": loss})
    return runs


def f9_report(tmp: Path, pre: dict, lns: dict, pre_loss=2.8, lns_loss=2.78) -> dict:
    def variant(name, profile, loss):
        runs = profiled_runs(tmp, name, [profile, profile], [loss, loss])
        return {"label": name, "params": {"placement": name, "n_layer": 8}, "runs": runs}

    return {"variants": [variant("pre", pre, pre_loss), variant("lns", lns, lns_loss)]}


F9 = ("F9a", "F9b", "F9c", "F9d")
# 8 blocks: the later half is blocks 5-8, block L/2 = 4.
PRE = {"cos": [0.1, 0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99], "rms": [1, 2, 3, 4, 5, 6, 7, 8]}
LNS = {"cos": [0.1, 0.5, 0.8, 0.9, 0.9, 0.92, 0.94, 0.96], "rms": [1, 2, 3, 4, 4, 4, 4, 4]}


def test_f9_pass(tmp_path: Path) -> None:
    v = by_id(decide_finding("f9", f9_report(tmp_path, PRE, LNS)))
    assert {k: x.status for k, x in v.items()} == dict.fromkeys(F9, "PASS")
    assert v["F9a"].intervals["RMS after L / after L/2"]["effect"] == pytest.approx(2.0)  # 8 / 4
    assert v["F9b"].measured["cos_late"] == pytest.approx(0.9725)  # mean of 0.95 .. 0.99
    drop = v["F9c"].intervals["pre - lns later-half cos"]
    assert drop["effect"] == pytest.approx(0.9725 - 0.93) and drop["n"] == [2, 2]
    assert v["F9d"].measured == {"L8_lns": 2.78, "L8_pre": 2.8}


def test_f9_fail_and_no_data(tmp_path: Path) -> None:
    flat = {"cos": [0.1, 0.5, 0.6, 0.7, 0.8, 0.85, 0.85, 0.88], "rms": [1, 2, 3, 4, 4, 4, 4, 4.4]}
    v = by_id(decide_finding("f9", f9_report(tmp_path, flat, flat, pre_loss=2.8, lns_loss=2.9)))
    # Growth 1.1 < 1.2; later-half cos 0.845 < 0.9; LNS 0.1 worse > 0.05; and F9c rests on
    # F9a's growth: without it there is nothing for LNS to damp.
    assert [v[c].status for c in F9] == ["FAIL", "FAIL", "NOT TESTABLE", "FAIL"]
    assert "RMS grew only x1.10 [1.10, 1.10] over the later half" in v["F9c"].note
    # With the growth there, an LNS that leaves the cosine where it was fails F9c.
    grown = {"cos": flat["cos"], "rms": PRE["rms"]}
    (tmp_path / "g").mkdir()
    v = by_id(decide_finding("f9", f9_report(tmp_path / "g", grown, grown)))
    assert v["F9c"].status == "FAIL"
    (tmp_path / "b").mkdir()
    report = f9_report(tmp_path / "b", PRE, LNS)
    for run in report["variants"][1]["runs"]:
        write_metrics(Path(run["run_dir"]), {0: {"train/loss": 3.0}})  # the probes were off
    v = by_id(decide_finding("f9", report))
    assert v["F9c"].status == "NO DATA" and v["F9a"].status == "PASS"


# ---------------------------------------------------------------- F11
def test_f11_pass_and_fail() -> None:
    good = depth_report(
        {
            ("post", 6): [2.6, 2.62], ("admin", 6): [2.58, 2.6], ("pre", 6): [2.62, 2.64],
            ("post", 24): [3.26, None], ("admin", 24): [2.6, 2.62], ("pre", 24): [2.75, 2.8],
        }
    )  # fmt: skip
    v = by_id(decide_finding("f11", good))
    assert {k: x.status for k, x in v.items()} == {"F11a": "PASS", "F11b": "PASS", "F11c": "PASS"}
    assert v["F11a"].measured["post"] == "inf (diverged)"
    assert v["F11c"].measured["L24_admin"] == pytest.approx(2.61)
    bad = depth_report(
        {
            ("post", 6): [2.6, 2.6], ("admin", 6): [2.7, 2.7], ("pre", 6): [2.6, 2.6],
            ("post", 24): [2.9, 2.9], ("admin", 24): [2.8, 2.8], ("pre", 24): [2.8, 2.8],
        }
    )  # fmt: skip
    v = by_id(decide_finding("f11", bad))
    # Post-LN only 0.1 above Pre-LN; Admin 0.1 below Post-LN; Admin 0.1 above Pre-LN at 6.
    assert [v[c].status for c in ("F11a", "F11b", "F11c")] == ["FAIL", "FAIL", "FAIL"]
    assert by_id(decide_finding("f11", {"variants": []}))["F11a"].status == "NO DATA"


def test_plot_profiles_draws_every_profiled_variant(tmp_path: Path) -> None:
    report = f9_report(tmp_path, PRE, LNS)
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.json").write_text(json.dumps(report))
    path = plot_profiles(tmp_path)
    assert path == tmp_path / "report" / "block_profile.png" and path.stat().st_size > 10_000
