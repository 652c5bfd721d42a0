"""F8, F10, F12 verdicts on hand-made sweeps (run dirs with metrics.csv), and the report's
per-layer heat maps and probe scalars."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from analysis import heatmaps
from analysis import report as reporting
from analysis.findings import decide_finding
from analysis.findings.settings import ReproduceConfig
from analysis.runs import Run
from tests.reports import by_id

Series = dict[str, list[tuple[int, float]]]


def write_metrics(path: Path, series: Series) -> str:
    """A sparse metrics.csv as CSVLogger writes it: one row per (step, metric)."""
    path.mkdir(parents=True, exist_ok=True)
    names = sorted(series)
    rows = [",".join(["epoch", "step", *names])]
    for k, name in enumerate(names):
        for step, value in series[name]:
            cells = [""] * len(names)
            cells[k] = repr(value)
            rows.append(",".join(["0", str(step), *cells]))
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")
    return str(path)


def variant(tmp: Path, params: dict, per_seed: list[Series], losses=None) -> dict:
    label = " ".join(f"{k}={v}" for k, v in params.items())
    runs = []
    for seed, series in enumerate(per_seed):
        loss = None if losses is None else losses[seed]
        run_dir = write_metrics(tmp / f"{label.replace(' ', '_')}_s{seed}", series)
        status = "diverged" if losses is not None and loss is None else "completed"
        runs.append({"run_dir": run_dir, "seed": seed, "status": status, "best_val_loss": loss})
    return {"label": label, "params": {"n_layer": 3, **params}, "runs": runs}


# --- F8 ------------------------------------------------------------------------------------------
def residual(start: list[float], end: list[float], peak: float) -> Series:
    """act_norm per layer at steps 0 and 100; act_max: 4x the RMS, ``peak`` at the end's top."""
    out: Series = {}
    for i, (a, b) in enumerate(zip(start, end, strict=True)):
        out[f"act_norm/layer_{i}"] = [(0, a), (50, (a + b) / 2), (100, b)]
        out[f"act_max/layer_{i}"] = [(0, 4 * a), (100, peak if i == len(end) - 1 else 4 * b)]
    return out


def test_f8_pass_and_fail(tmp_path: Path) -> None:
    pre = residual([1.0, 2.0, 3.0], [5.0, 10.0, 20.0], 100.0)  # depth 4x, training 20/3 and 25x
    peri = residual([1.0, 1.5, 2.0], [2.0, 4.0, 6.0], 30.0)  # the end: 20/6 and 100/30 below pre
    good = {
        "variants": [
            variant(tmp_path / "a", {"placement": "pre"}, [pre, pre]),
            variant(tmp_path / "a", {"placement": "sandwich"}, [peri, peri]),
        ]
    }
    v = by_id(decide_finding("f8", good))
    assert [v[c].status for c in ("F8a", "F8b", "F8c")] == ["PASS"] * 3
    assert v["F8a"].measured["pre_last_over_first"] == 4.0
    assert v["F8b"].intervals["rms growth"]["effect"] == pytest.approx(20 / 3, rel=1e-3)
    assert v["F8b"].intervals["max growth"]["effect"] == pytest.approx(100 / 12, rel=1e-3)
    # pre's last layer grew 20/3, sandwich's 6/2: 2.22x faster
    ratio = v["F8c"].intervals["pre growth / peri growth"]
    assert ratio["effect"] == pytest.approx((20 / 3) / (6 / 2), rel=1e-3) and ratio["n"] == [2, 2]
    # Half of pre's values everywhere but the same growth: lower, not more balanced.
    half = residual([0.5, 1.0, 1.5], [2.5, 5.0, 10.0], 50.0)
    rows = [variant(tmp_path / "h", {"placement": p}, [x, x]) for p, x in (("pre", pre),
            ("sandwich", half))]  # fmt: skip
    assert by_id(decide_finding("f8", {"variants": rows}))["F8c"].status == "FAIL"
    flat = residual([1.0, 1.0, 1.0], [1.5, 1.5, 1.5], 6.0)  # neither depth nor training growth
    bad = {
        "variants": [
            variant(tmp_path / "b", {"placement": "pre"}, [flat, flat]),
            variant(tmp_path / "b", {"placement": "sandwich"}, [flat, flat]),
        ]
    }
    assert {x.status for x in decide_finding("f8", bad)} == {"FAIL"}
    one_seed = {"variants": [variant(tmp_path / "c", {"placement": "pre"}, [pre])]}
    assert {x.status for x in decide_finding("f8", one_seed)} == {"NO DATA"}


# --- F10 -----------------------------------------------------------------------------------------
def entropy(minimum: float) -> Series:
    """entropy_min per layer: starts at 2.5, layer 1 reaches ``minimum`` at step 100."""
    return {
        f"attn/entropy_min/layer_{i}": [(0, 2.5), (100, minimum if i == 1 else 2.0)]
        for i in range(3)
    }


def f10_report(tmp: Path, arms: dict[bool, dict[float, tuple[float, list]]]) -> dict:
    rows = []
    for qk, by_lr in arms.items():
        for lr, (minimum, losses) in by_lr.items():
            params = {"lr": lr, "model.qk_norm": qk}
            rows.append(variant(tmp, params, [entropy(minimum)] * len(losses), losses))
    return {"variants": rows}


def test_f10_pass_fail_and_no_data(tmp_path: Path) -> None:
    good = f10_report(
        tmp_path / "a",
        {
            False: {1e-3: (2.0, [2.6, 2.6]), 1e-2: (0.8, [2.5, 2.5]), 1e-1: (0.05, [2.9, None])},
            True: {1e-3: (2.1, [2.6, 2.6]), 1e-2: (1.9, [2.4, 2.4]), 1e-1: (1.5, [2.6, 2.6])},
        },
    )
    v = by_id(decide_finding("f10", good))
    assert [v[c].status for c in ("F10a", "F10b", "F10c")] == ["PASS"] * 3
    a = v["F10a"].intervals
    assert a["min entropy at lr 0.1"]["effect"] == 0.05
    assert a["min entropy at lr 0.001"]["effect"] == 2.0
    assert v["F10b"].intervals["min entropy at lr 0.1"]["effect"] == 1.5
    assert v["F10c"].measured["collapsed_lrs"] == ["0.1"]  # 0.8 nats is low, not collapsed
    gap = v["F10c"].intervals["no-qk - qk at lr 0.1"]  # a diverged seed: +inf, decided
    assert gap["effect"] == "inf (diverged)" and gap["outcome"] == "PASS"
    assert v["F10c"].measured["diverged_runs"] == 1
    # QK-norm collapses as well (0.08 < 0.1 nats) and changes no loss.
    same = {1e-3: (2.0, [2.6, 2.6]), 1e-1: (0.08, [2.6, 2.6])}
    bad = by_id(decide_finding("f10", f10_report(tmp_path / "b", {False: same, True: same})))
    assert [bad[c].status for c in ("F10a", "F10b", "F10c")] == ["PASS", "FAIL", "FAIL"]
    # Halving is no collapse: 0.5 nats stays above the floor.
    flat = {1e-3: (2.0, [2.6, 2.6]), 1e-1: (0.5, [2.6, 2.6])}
    none = by_id(decide_finding("f10", f10_report(tmp_path / "c", {False: flat, True: flat})))
    assert none["F10a"].status == "FAIL" and none["F10c"].status == "NO DATA"


# --- F12 -----------------------------------------------------------------------------------------
STEPS = (0, 50, 100, 150)  # log Z logged at these steps; warmup ends at 50
QUIET = (4.5, 4.0, 3.6, 3.5)  # after warmup it falls 0.5 nat and stays above 0
LRS = (3e-3, 1e-2, 3e-2, 1e-1)


def f12_report(tmp: Path, arms: dict[float, dict[float, tuple[tuple, list]]]) -> dict:
    """z-loss -> lr -> (log Z at STEPS, best val loss per seed)."""
    rows = []
    for z, by_lr in arms.items():
        for lr, (path, losses) in by_lr.items():
            series = {"logits/log_z": list(zip(STEPS, path, strict=True))}
            rows.append(variant(tmp, {"lr": lr, "optim.z_loss": z}, [series] * 2, losses))
    return {"variants": rows}


def grid(top: tuple, z_top: tuple, best=(2.400, 2.401), z_best=(2.410, 2.411)) -> dict:
    """Both arms at LRS: QUIET but at the top lr; each arm's best at 1e-2."""

    def arm(last: tuple, at_best: tuple) -> dict:
        return {lr: (last if lr == LRS[-1] else QUIET, list(at_best if lr == 1e-2 else (2.9, 2.9)))
                for lr in LRS}  # fmt: skip

    return {0.0: arm(top, best), 1e-4: arm(z_top, z_best)}


def test_f12_pass_and_fail(tmp_path: Path) -> None:
    settings = ReproduceConfig(warmup_steps=50, max_steps=150)
    # The top rate rises 1 nat after warmup, then falls to -2.0: a late fall of 6 nats, below 0.
    good = f12_report(tmp_path / "a", grid((4.5, 4.0, 5.0, -2.0), (1.0, 0.6, 0.5, 0.5)))
    v = by_id(decide_finding("f12", good, settings))
    assert [v[c].status for c in ("F12a", "F12b", "F12c")] == ["PASS"] * 3
    assert v["F12a"].measured == {
        "fall_lowest_lr": 0.5, "fall_top_lr": 6.0, "min_top_lr": -2.0, "rise_top_lr": 1.0
    }  # fmt: skip
    # each arm at its best lr (1e-2): 0.01 ± 4.303 * 0.000707, inside the 0.05 margin
    assert v["F12c"].intervals["with z - without"]["effect"] == pytest.approx(0.01)
    assert v["F12c"].intervals["with z - without"]["hi"] == pytest.approx(0.013, abs=1e-3)
    # First-minus-last saw the same runs fall 6.5; a late fall that stays above 0 is no
    # divergence, z-loss that leaves |log Z| at 1.4 of 1.5 holds nothing, and costs 0.2.
    bad = f12_report(
        tmp_path / "b", grid((4.5, 4.0, 2.5, 1.5), (4.5, 4.0, 2.5, 1.4), z_best=(2.60, 2.62))
    )
    assert {x.status for x in decide_finding("f12", bad, settings)} == {"FAIL"}
    # log Z only rises after warmup at the top lr: no divergence for F12a to see, while
    # z-loss's pull toward 0 is decided anyway (final |log Z| 0.5 against 4.4).
    still = f12_report(tmp_path / "c", grid((4.5, 4.0, 4.6, 4.4), (1.0, 0.6, 0.5, 0.5)))
    v = by_id(decide_finding("f12", still, dataclasses.replace(settings, max_steps=1000)))
    assert v["F12a"].status == "NOT TESTABLE"
    assert v["F12a"].note.startswith(
        "NOT TESTABLE AT THIS SIZE: without z-loss log Z fell at most 0.00 nats below its "
        "end-of-warmup value at lr 0.1 (it rose up to 0.60"
    )
    assert "in 1000 steps" in v["F12a"].note and "the run's length" in v["F12a"].note
    assert v["F12b"].status == "PASS" and v["F12c"].status == "PASS"
    three = {z: dict(list(by.items())[1:]) for z, by in grid(QUIET, QUIET).items()}
    assert (
        by_id(decide_finding("f12", f12_report(tmp_path / "d", three)))["F12a"].status == "NO DATA"
    )


# --- the report: heat maps and probe scalars ------------------------------------------------------
def run_of(path: Path, series: Series, seed: int, summary: dict | None = None) -> Run:
    metrics = {k: sorted(v) for k, v in series.items()}
    return Run(path, {"status": "completed", **(summary or {})}, {"seed": seed}, metrics)


def test_layer_grid_is_the_seed_mean_per_layer_and_step(tmp_path: Path) -> None:
    a = run_of(
        tmp_path, {"act_max/layer_0": [(0, 1.0), (10, 3.0)], "act_max/layer_1": [(0, 2.0)]}, 0
    )
    b = run_of(tmp_path, {"act_max/layer_0": [(0, 3.0)], "act_max/layer_1": [(10, 8.0)]}, 1)
    steps, grid = heatmaps.layer_grid([a, b], "act_max")
    assert steps == [0, 10]
    np.testing.assert_array_equal(grid, [[2.0, 3.0], [2.0, 8.0]])
    # attn/entropy is not attn/entropy_min
    c = run_of(tmp_path, {"attn/entropy_min/layer_0": [(0, 1.0)]}, 0)
    assert heatmaps.layer_grid([c], "attn/entropy") is None


def test_report_draws_heat_maps_and_tabulates_probe_scalars(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed, (spikes, sharp, low) in enumerate([(1, 40.0, 0.5), (3, 60.0, 1.5)]):
        run = sweep / f"{seed}_gpt-pre-s{seed}"
        series = {
            "train/loss": [(0, 3.0), (10, 2.0)],
            "train/loss_spikes": [(0, 0.0), (10, float(spikes))],
            "sharpness/hessian": [(0, 10.0), (10, sharp)],
            "attn/entropy_min/layer_0": [(0, 2.0), (10, low)],
            "attn/entropy_min/layer_1": [(0, 2.2), (10, low + 0.1)],
            "block_cos/layer_0": [(0, 0.5), (10, 0.9)],
        }
        write_metrics(run, series)
        summary = {"status": "completed", "model": "gpt", "placement": "pre", "seed": seed}
        summary.update(norm="layernorm", n_layer=2, n_embd=8, lr=1e-3, warmup_steps=0)
        (run / "summary.json").write_text(json.dumps({**summary, "loss_spikes": spikes}))
    report = reporting.write_report(sweep)
    (row,) = report["variants"]
    assert row["loss_spikes"]["values"] == [1, 3]  # from summary.json
    assert row["final_sharpness"]["mean"] == 50.0  # the last sharpness/hessian, mean over seeds
    assert row["min_attn_entropy"]["values"] == [0.5, 1.5]  # min over layers and steps
    table = (sweep / "report" / "report.md").read_text()
    assert "| loss spikes | final sharpness | min attn entropy |" in table
    assert "2.0 ± 1.4 | 50.0 ± 14.1 | 1.000 ± 0.707 |" in table
    drawn = {"heat_attn_entropy_min.png", "heat_block_cos.png", "sharpness.png"}
    assert drawn <= set(report["plots"])
    assert "heat_act_norm.png" not in report["plots"]  # nothing logged it
    for name in drawn:
        assert (sweep / "report" / name).read_bytes().startswith(b"\x89PNG")
