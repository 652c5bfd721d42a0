"""A finding's sweep (experiments/sweep.py, experiments/reproduce.py): the estimate counts each
job's work, a progress line per run, every finding once under ``all``, a second launch's time and
command, and the launches after the grid (widened rates, arms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.findings import FINDINGS
from analysis.findings.settings import read_reproduce
from experiments import reproduce
from experiments import sweep as reproduce_sweep
from experiments import verdicts as reproduce_verdicts


def test_estimate_counts_each_jobs_flops_layer_steps_and_steps() -> None:
    cfg = reproduce_sweep.compose("f3_depth", [])
    jobs = reproduce_sweep.planned_jobs(cfg, [])
    by_depth = {}
    for job in jobs:
        depth = int(dict(x.split("=", 1) for x in job)["model.n_layer"])
        by_depth[depth] = reproduce_sweep.job_work(cfg, job)
    # 6 x 12 L d^2 + 12 L T d FLOPs a token, linear in the depth at d=64, T=64, B=16, 400 steps,
    # and validation adds 8 batches a third as costly every 50 steps: 1 + 8 x 8 / 3 / 400.
    val = 1 + 8 * 8 / 3 / 400
    per_token = 6 * 12 * 64 * 64 + 12 * 64 * 64
    assert by_depth[3] == pytest.approx((3 * per_token * 16 * 64 * 400 * val, 3 * 400 * val, 400))
    assert by_depth[12][0] == pytest.approx(4 * by_depth[3][0])
    # Two jobs at a time, one thread each.
    seconds = (
        sum(
            reproduce_sweep.OVERHEAD_S
            + reproduce_sweep.STEP_S * 400
            + reproduce_sweep.job_work(cfg, j)[0] / reproduce_sweep.RATE_FLOPS
            + reproduce_sweep.job_work(cfg, j)[1] * reproduce_sweep.LAYER_STEP_S
            for j in jobs
        )
        / 2
    )
    assert reproduce_sweep.estimate_s(cfg, jobs, "train") == pytest.approx(seconds)
    # A BPE vocabulary adds its head: 6 x V x d FLOPs a token (F12: V = 1,024).
    f12 = reproduce_sweep.compose("f12_z_loss", [])
    job = reproduce_sweep.planned_jobs(f12, [])[0]
    plain = reproduce_sweep.job_work(reproduce_sweep.compose("f6_lr_sensitivity", []), job)[0] / 500
    assert reproduce_sweep.job_work(f12, job)[0] / 1000 - plain == pytest.approx(
        6 * 1024 * 64 * 16 * 64 * (1 + 20 * 8 / 3 / 1000), rel=0.02
    )


def test_progress_line_names_the_run_its_loss_and_the_pace(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"best_val_loss": 2.345678}))
    line = reproduce_sweep.run_line(tmp_path, 4, 48, "placement=post seed=1", "completed", "x")
    assert line == "run 5/48: placement=post seed=1 -> completed, best val 2.3457 [x]"
    assert reproduce_sweep.run_line(tmp_path / "none", 0, 2, "a", "diverged", "x") == (
        "run 1/2: a -> diverged [x]"
    )


@pytest.mark.slow  # composes all 13 sweeps; test_experiment_composes_and_sweeps checks each fast
def test_all_runs_every_finding_once_and_f13_shares_f6s_sweep(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "SWEEPS", tmp_path)  # not this checkout's finished sweeps
    assert reproduce.main(["all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    sweeps = len({f.experiment for f in FINDINGS.values()})  # F13 reads F6's sweep
    assert sweeps == len(FINDINGS) - 1
    assert out.count("estimate: ~") == len(FINDINGS) and f"findings, {sweeps} sweeps: ~" in out
    assert FINDINGS["f13"].experiment == FINDINGS["f6"].experiment
    assert (
        reproduce_verdicts.verdict_stem("f6") == "verdict"
        and reproduce_verdicts.verdict_stem("f13") == "verdict_f13"
    )


def test_a_second_launch_into_a_sweep_adds_its_time_and_command() -> None:
    earlier = {
        "wall_s": 60.0,
        "cpu_s": 100.0,
        "command": "reproduce.py placements",
        "load_start": 1.0,
    }
    more = reproduce_verdicts.extended(
        earlier, 30.04, 50.0, "reproduce.py placements optim.lr=3e-2"
    )
    assert more == {
        "wall_s": 90.0,
        "cpu_s": 150.0,
        "load_start": 1.0,
        "command": "reproduce.py placements; then reproduce.py placements optim.lr=3e-2",
        "launches": 2,
    }
    assert reproduce_verdicts.extended({**earlier, **more}, 1.0, 1.0, "x")["launches"] == 3
    assert (
        reproduce_verdicts.over(more) == " over 2 launches"
        and reproduce_verdicts.over(earlier) == ""
    )


@pytest.mark.parametrize("experiment", ["placements_depth", "f3_depth", "f11_admin", "vit_depth"])
def test_widened_grids_launch_after_the_grid_at_the_cpu_size_only(experiment: str) -> None:
    cfg = reproduce_sweep.compose(experiment, [])
    grid, *more = reproduce_sweep.launch_overrides(cfg, ["seed=0"])
    assert grid == ["seed=0"] and more and all(o[0] == "seed=0" for o in more)
    base = {
        float(x)
        for x in reproduce_sweep.swept_values(reproduce_sweep.planned_jobs(cfg, grid))["optim.lr"]
    }
    widen = read_reproduce(cfg).widen
    for overrides in more[: len(widen)]:  # each widening runs rates outside the grid, one seed
        jobs = reproduce_sweep.planned_jobs(cfg, overrides)
        lrs = {float(x) for x in reproduce_sweep.swept_values(jobs)["optim.lr"]}
        assert jobs and not lrs & base and reproduce_sweep.swept_values(jobs)["seed"] == ["0"]
        assert all(lr < min(base) or lr > max(base) for lr in lrs)  # beyond the grid's edge
        every = sorted(base | lrs)  # and the grid continues in its own steps (3x-3.3x)
        assert all(2.99 <= b / a <= 3.4 for a, b in zip(every, every[1:], strict=False))
    gpu = reproduce_sweep.compose(f"{experiment}_gpu", [])
    arms = read_reproduce(gpu).arms
    assert reproduce_sweep.launch_overrides(gpu, []) == [[], *arms]


def test_the_league_runs_olmo2s_block_as_an_arm_on_the_grids_rates_and_seeds() -> None:
    cfg = reproduce_sweep.compose("placements_depth", [])
    grid, *_, arm, control = reproduce_sweep.launch_overrides(cfg, [])
    assert control == ["placement=ngpt", "model.pos=learned", "model.tie_weights=true"]
    jobs = reproduce_sweep.planned_jobs(cfg, arm)
    swept = reproduce_sweep.swept_values(jobs)
    assert len(jobs) == 4 * 3 and [float(x) for x in swept["optim.lr"]] == [3e-4, 1e-3, 3e-3, 1e-2]
    for key, value in [("placement", "reorder"), ("norm", "rmsnorm"),
                       ("model.qk_norm_width", "full")]:  # fmt: skip
        assert all(f"{key}={value}" in job for job in jobs)
