"""Select, then confirm: each variant's best lr is chosen on the grid's seeds, the claim compares
fresh seeds at that lr (analysis/findings/common.py), and scripts/reproduce.py launches those
fresh seeds once the grid has finished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.findings import decide_finding
from analysis.findings.common import confirm_at
from analysis.findings.settings import ConfirmConfig, ReproduceConfig, read_reproduce
from experiments import reproduce
from experiments import sweep as reproduce_sweep
from tests.reports import row

FRESH = [100, 101, 102, 103, 104]


def runs(values: list[float], seeds: list[int]) -> list[dict]:
    return [
        {"run_dir": "-", "seed": s, "status": "completed", "best_val_loss": x}
        for x, s in zip(values, seeds, strict=True)
    ]


def f5_row(norm: str, lr: float, grid: list[float], fresh: list[float] | None = None) -> dict:
    r = row([], placement="pre", norm=norm, lr=lr)
    r["runs"] = runs(grid, [0, 1]) + (runs(fresh, FRESH) if fresh else [])
    return r


def test_the_best_lr_is_chosen_on_the_grid_and_the_claim_decided_on_fresh_seeds() -> None:
    # On the grid's seeds LayerNorm is best at 1e-3 (2.40 < 2.45); at 3e-3 one lucky grid
    # pair would not matter. The fresh seeds at 1e-3 are what F5 compares.
    rows = [
        f5_row("layernorm", 1e-3, [2.40, 2.40], [2.50, 2.51, 2.52, 2.50, 2.51]),
        f5_row("layernorm", 3e-3, [2.45, 2.45]),
        f5_row("rmsnorm", 1e-3, [2.41, 2.41], [2.51, 2.52, 2.50, 2.52, 2.51]),
        f5_row("rmsnorm", 3e-3, [2.60, 2.60]),
    ]
    report = {"variants": rows}
    assert confirm_at(report, ["placement", "norm"], FRESH) == [
        {"placement": "pre", "norm": "layernorm", "lr": 1e-3},
        {"placement": "pre", "norm": "rmsnorm", "lr": 1e-3},
    ]
    v = decide_finding("f5", report, ReproduceConfig(confirm=ConfirmConfig(FRESH, {})))[0]
    assert v.status == "PASS"  # 0.004 apart on 5 fresh seeds each, inside ±0.05
    ci = v.intervals["pre rmsnorm - layernorm"]
    assert ci["n"] == [5, 5] and ci["effect"] == pytest.approx(2.512 - 2.508)
    assert v.measured["pre_layernorm"] == pytest.approx(2.508)
    assert v.measured["confirm_seeds"] == {"pre-rmsnorm": 5, "pre-layernorm": 5}
    assert "compared on fresh seeds at that lr" in v.note
    # Without the confirm setting the choice still reads the grid's seeds only (those run at more
    # than one rate): the seeds run at 1e-3 alone never pull LayerNorm's choice to 3e-3 (their
    # mean 2.48 would); the claim then reads every run at the chosen rate, 7 a variant.
    plain = decide_finding("f5", report)[0]
    assert plain.measured["best_lr"] == {"pre-layernorm": 1e-3, "pre-rmsnorm": 1e-3}
    assert plain.intervals["pre rmsnorm - layernorm"]["n"] == [7, 7]


def test_confirming_runs_at_another_lr_are_no_data() -> None:
    rows = [
        f5_row("layernorm", 1e-3, [2.40, 2.40]),
        f5_row("layernorm", 3e-3, [2.45, 2.45], [2.3, 2.3, 2.3, 2.3, 2.3]),
        f5_row("rmsnorm", 1e-3, [2.41, 2.41], [2.5] * 5),
        f5_row("rmsnorm", 3e-3, [2.60, 2.60]),
    ]
    v = decide_finding("f5", {"variants": rows}, ReproduceConfig(confirm=ConfirmConfig(FRESH, {})))[
        0
    ]
    assert v.status == "NO DATA" and "0 confirming runs at its best lr 0.001" in v.note


def write_run(out: Path, name: str, seed: int, norm: str, lr: float, loss: float) -> None:
    run = out / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra/config.yaml").write_text(
        f"seed: {seed}\nplacement: {{name: pre}}\nnorm: {{name: {norm}}}\noptim: {{lr: {lr}}}\n"
    )
    summary = {"status": "completed", "best_val_loss": loss, "seed": seed}
    (run / "summary.json").write_text(json.dumps(summary))


def test_reproduce_launches_fresh_seeds_at_each_variants_best_lr(tmp_path, monkeypatch) -> None:
    small = ["placement=pre", "optim.lr=1e-3,3e-3"]  # 2 norms x 2 lrs x 2 seeds: 8 grid jobs
    out = tmp_path / "f5"
    cfg = reproduce_sweep.compose("f5_norms", small)
    grid = reproduce_sweep.planned_jobs(cfg, small)
    best = {"layernorm": 3e-3, "rmsnorm": 1e-3}
    for job, name in zip(grid, reproduce_sweep.job_dirs(cfg, grid), strict=True):
        o = dict(item.split("=", 1) for item in job)
        loss = 2.4 if float(o["optim.lr"]) == best[o["norm"]] else 2.6
        write_run(out, name, int(o["seed"]), o["norm"], float(o["optim.lr"]), loss)
    launched = []

    def train(experiment, jobs, dirs, sweep_out, overrides, mode="train"):
        launched.append(overrides)
        for job, name in zip(jobs, dirs, strict=True):
            o = dict(item.split("=", 1) for item in job)
            loss = 2.40 + 0.001 * (int(o["seed"]) - 100)
            write_run(sweep_out, name, int(o["seed"]), o["norm"], float(o["optim.lr"]), loss)
        return 0

    monkeypatch.setattr(reproduce, "run_sweep", train)
    assert reproduce.main(["f5", "--out", str(out), *small]) == 0
    fixed = sorted((o[3], float(o[4].split("=")[1]), o[5]) for o in launched)
    assert [o[:3] for o in launched] == [[*small, "placement=pre"]] * 2
    assert fixed == [
        ("norm=layernorm", 3e-3, "seed=100,101,102,103,104"),
        ("norm=rmsnorm", 1e-3, "seed=100,101,102,103,104"),
    ]
    claim = json.loads((out / "verdict.json").read_text())["claims"][0]
    assert claim["intervals"]["pre rmsnorm - layernorm"]["n"] == [5, 5]
    assert claim["status"] == "PASS"  # the same fresh losses for both norms
    # Everything finished: a second command launches nothing.
    launched.clear()
    assert reproduce.main(["f5", "--out", str(out), *small]) == 0 and launched == []


def test_a_row_read_at_a_named_rate_holds_the_grids_seeds_only() -> None:
    from analysis.findings.common import variant

    report = {"variants": [f5_row("layernorm", 1e-3, [2.4, 2.4], [2.6] * 5)]}
    report["confirm_seeds"] = FRESH
    assert [r["seed"] for r in variant(report, norm="layernorm", lr=1e-3)["runs"]] == [0, 1]
    report["confirm_seeds"] = []
    assert len(variant(report, norm="layernorm", lr=1e-3)["runs"]) == 7


@pytest.mark.parametrize(
    "experiment",
    [
        "placements_depth",
        "f3_depth",
        "f5_norms",
        "f11_admin",
        "vit_depth",
        "f12_z_loss",
        "f9_depth_curse",
    ],
)
def test_every_ranking_at_best_rates_confirms_on_five_fresh_seeds(experiment: str) -> None:
    cfg = reproduce_sweep.compose(experiment, [])
    confirm = read_reproduce(cfg).confirm
    grid = reproduce_sweep.swept_values(reproduce_sweep.planned_jobs(cfg, []))["seed"]
    assert len(confirm.seeds) >= 5 and not {str(s) for s in confirm.seeds} & set(grid)
    assert "lr" not in confirm.by  # the rate is what the grid chooses


def test_the_lr_table_chooses_on_the_grid_and_ranks_on_the_fresh_seeds(tmp_path) -> None:
    """Seeds run at one rate only are confirming seeds: the curve, the best lr and the LR
    sensitivity come from the grid's seeds, the loss at the best lr and the rank from them."""
    from analysis import lr_sweep
    from analysis.runs import Run
    from analysis.variants import Variant

    def member(lr: float, losses: dict[int, float]) -> Variant:
        runs = [
            Run(tmp_path / f"{lr}-{s}", {"status": "completed", "final_val_loss": x, "seed": s},
                {"seed": s}, {"train/loss": [(0, 4.0)]})
            for s, x in losses.items()
        ]  # fmt: skip
        return Variant({"placement": "pre", "lr": lr}, runs, f"pre lr={lr}")

    fresh = {100: 2.9, 101: 3.0, 102: 3.1}  # the grid's luck does not hold at 1e-3
    members = [member(1e-3, {0: 2.5, 1: 2.5, **fresh}), member(3e-3, {0: 2.6, 1: 2.7})]
    entry = lr_sweep.lr_curve(members)
    assert entry["best_lr"] == 1e-3 and entry["best_val_loss"] == pytest.approx(2.5)
    assert [p["n"] for p in entry["points"]] == [2, 2]
    assert entry["lr_sensitivity"] == pytest.approx((0 + 0.15) / 2)
    assert entry["confirm"]["n"] == 3 and entry["confirm"]["loss"] == pytest.approx(3.0)
    assert lr_sweep.best_point(entry) == (pytest.approx(3.0), pytest.approx(0.1), 3)
