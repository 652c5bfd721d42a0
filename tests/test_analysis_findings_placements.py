"""F9 and F11 claims (scripts/analysis/findings/placements.py) on report.json pieces with known
numbers, and the block profile they read against blocks whose effect is known in closed form."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

import train
from scripts.analysis.block_profile import PROFILE, block_profile, profile_blocks
from scripts.analysis.findings import evaluate
from tests.reports import by_id, depth_report


# ---------------------------------------------------------------- the block profile
class Shift(nn.Module):
    """h = x + c * e_0: adds c along the first feature."""

    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c * torch.nn.functional.one_hot(torch.tensor(0), x.shape[-1])


class Known(nn.Module):
    def __init__(self, shifts: list[float]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Shift(c) for c in shifts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_profile_blocks_matches_closed_form() -> None:
    # Every position is e_1 (unit, orthogonal to e_0): after the blocks the stream is
    # e_1 + s e_0 with s the sum of the shifts so far.
    x = torch.nn.functional.one_hot(torch.tensor(1), 4).float().expand(2, 3, 4)
    profile = profile_blocks(Known([1.0, 2.0]), x)
    # Block 1: cos(e_1, e_1 + e_0) = 1/sqrt(2); block 2: cos(e_1 + e_0, e_1 + 3 e_0) =
    # (1 + 3) / (sqrt(2) sqrt(10)). RMS over 4 features: sqrt((1 + s^2) / 4).
    assert profile["cos"] == pytest.approx([1 / math.sqrt(2), 4 / math.sqrt(20)])
    assert profile["rms"] == pytest.approx([math.sqrt(2 / 4), math.sqrt(10 / 4)])


def test_block_profile_of_a_run_is_measured_once_and_kept(
    tmp_path, tiny_run, compose_cfg, one_thread
) -> None:
    run_dir = tmp_path / "run"
    train.run(compose_cfg([*tiny_run, "model.n_layer=3", f"run_dir={run_dir}"]))
    (run_dir / ".hydra").mkdir(exist_ok=True)  # a Hydra launch writes it; here by hand
    cfg = compose_cfg([*tiny_run, "model.n_layer=3", f"run_dir={run_dir}"])
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    profile = block_profile(run_dir)
    assert len(profile["cos"]) == len(profile["rms"]) == 3
    assert all(-1 <= c <= 1 for c in profile["cos"]) and all(r > 0 for r in profile["rms"])
    assert json.loads((run_dir / PROFILE).read_text()) == profile
    (run_dir / "last.ckpt").unlink()  # the kept file answers; nothing is measured again
    assert block_profile(run_dir) == profile
    assert block_profile(tmp_path / "missing") is None


# ---------------------------------------------------------------- F9
def profiled_runs(tmp: Path, name: str, profiles: list[dict], losses: list[float]) -> list[dict]:
    runs = []
    for i, (profile, loss) in enumerate(zip(profiles, losses, strict=True)):
        path = tmp / f"{name}-{i}"
        path.mkdir()
        (path / PROFILE).write_text(json.dumps(profile))
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
    v = by_id(evaluate("f9", f9_report(tmp_path, PRE, LNS)))
    assert {k: x.status for k, x in v.items()} == dict.fromkeys(F9, "PASS")
    assert v["F9a"].measured["growth"] == pytest.approx(2.0)  # 8 / 4
    assert v["F9b"].measured["cos_late"] == pytest.approx(0.9725)  # mean of 0.95 .. 0.99
    assert v["F9c"].measured["drop"] == pytest.approx(0.9725 - 0.93)
    assert v["F9d"].measured == {"L8_lns": 2.78, "L8_pre": 2.8}


def test_f9_fail_and_no_data(tmp_path: Path) -> None:
    flat = {"cos": [0.1, 0.5, 0.6, 0.7, 0.8, 0.85, 0.85, 0.88], "rms": [1, 2, 3, 4, 4, 4, 4, 4.4]}
    v = by_id(evaluate("f9", f9_report(tmp_path, flat, flat, pre_loss=2.8, lns_loss=2.9)))
    # Growth 1.1 < 1.2; later-half cos 0.845 < 0.9; no drop; LNS 0.1 worse > 0.05.
    assert [v[c].status for c in F9] == ["FAIL"] * 4
    (tmp_path / "b").mkdir()
    report = f9_report(tmp_path / "b", PRE, LNS)
    for run in report["variants"][1]["runs"]:
        Path(run["run_dir"], PROFILE).unlink()  # no profile, no checkpoint to measure
    v = by_id(evaluate("f9", report))
    assert v["F9c"].status == "NO DATA" and v["F9a"].status == "PASS"


# ---------------------------------------------------------------- F11
def test_f11_pass_and_fail() -> None:
    good = depth_report(
        {
            ("post", 6): [2.6, 2.62], ("admin", 6): [2.58, 2.6], ("pre", 6): [2.62, 2.64],
            ("post", 24): [3.26, None], ("admin", 24): [2.6, 2.62], ("pre", 24): [2.75, 2.8],
        }
    )  # fmt: skip
    v = by_id(evaluate("f11", good))
    assert {k: x.status for k, x in v.items()} == {"F11a": "PASS", "F11b": "PASS", "F11c": "PASS"}
    assert v["F11a"].measured["post"] == "inf (diverged)"
    assert v["F11c"].measured["L24_admin"] == pytest.approx(2.61)
    bad = depth_report(
        {
            ("post", 6): [2.6, 2.6], ("admin", 6): [2.7, 2.7], ("pre", 6): [2.6, 2.6],
            ("post", 24): [2.9, 2.9], ("admin", 24): [2.8, 2.8], ("pre", 24): [2.8, 2.8],
        }
    )  # fmt: skip
    v = by_id(evaluate("f11", bad))
    # Post-LN only 0.1 above Pre-LN; Admin 0.1 below Post-LN; Admin 0.1 above Pre-LN at 6.
    assert [v[c].status for c in ("F11a", "F11b", "F11c")] == ["FAIL", "FAIL", "FAIL"]
    assert by_id(evaluate("f11", {"variants": []}))["F11a"].status == "NO DATA"
