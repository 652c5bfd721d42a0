"""Every experiment composes at both sizes with the sweep it promises, and its CPU size fits two
cores (conf/experiment/*.yaml, read by scripts/reproduce.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analysis.findings import FINDINGS
from experiments import sweep as reproduce_sweep
from models.placement import PLACEMENTS

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
CPU_EXPERIMENTS = [e for e in EXPERIMENTS if not e.endswith("_gpu")]


# --- configs -------------------------------------------------------------------------------------
def test_every_finding_has_both_sizes() -> None:
    for finding in FINDINGS.values():
        assert finding.experiment in EXPERIMENTS
        assert f"{finding.experiment}_gpu" in EXPERIMENTS
    assert all(e.removesuffix("_gpu") in CPU_EXPERIMENTS for e in EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_sweeps(experiment: str) -> None:
    cfg = reproduce_sweep.compose(experiment, [])
    jobs = reproduce_sweep.planned_jobs(cfg, [])
    swept = reproduce_sweep.swept_values(jobs)
    assert len(jobs) >= 2 and all(len(set(job)) == len(job) for job in jobs)
    assert len(jobs) == math.prod(len(v) for v in swept.values())
    # Every job composes (a typo in a swept key or option fails here) ...
    for job in (jobs[0], jobs[-1]):
        reproduce_sweep.compose(experiment, job)
    # ... each study logs to a wandb project of its own, at both sizes (the CPU size to CSV
    # only unless logger=many asks for wandb too) ...
    gpu = experiment.endswith("_gpu")
    logged = cfg if gpu else reproduce_sweep.compose(experiment, ["logger=many"])
    assert logged.logger.wandb.project == "normlab-" + experiment.removesuffix("_gpu")
    assert gpu == ("wandb" in cfg.logger) and "csv" in cfg.logger
    # ... and the size decides where and how it runs.
    if experiment.endswith("_gpu"):
        assert cfg.trainer.accelerator == "gpu"
        assert cfg.hydra.launcher._target_.endswith("BasicLauncher")
    else:
        assert cfg.trainer.accelerator == "cpu"
        assert cfg.num_threads * cfg.hydra.launcher.n_jobs <= 2  # fits the 2-core reference box


def test_finding_figures_plot_keys_their_sweeps_vary() -> None:
    """Each finding's x-vs-y figure (drawn into the report, copied by --publish) plots a key
    that both sizes of its experiment sweep."""
    figures = [(f, fig) for f in FINDINGS.values() for fig in f.figures]
    names = {"lr_sweep.png", "acc_vs_batch.png", "entropy_vs_lr.png", "log_z_vs_lr.png"}
    assert {fig.name for _, fig in figures} == names
    for finding, figure in figures:
        assert figure.name in finding.plots
        for size in ("", "_gpu"):
            cfg = reproduce_sweep.compose(finding.experiment + size, [])
            swept = reproduce_sweep.swept_values(reproduce_sweep.planned_jobs(cfg, []))
            assert len(swept[figure.x]) >= 2


def test_gpu_size_overrides_sweep_params() -> None:
    cpu = reproduce_sweep.swept_values(
        reproduce_sweep.planned_jobs(reproduce_sweep.compose("f3_depth", []), [])
    )
    gpu = reproduce_sweep.swept_values(
        reproduce_sweep.planned_jobs(reproduce_sweep.compose("f3_depth_gpu", []), [])
    )
    assert cpu["placement"] == gpu["placement"] == ["post", "pre", "deepnorm"]
    assert max(map(int, gpu["model.n_layer"])) > max(map(int, cpu["model.n_layer"]))


def test_command_line_sweep_replaces_experiment_params() -> None:
    cfg = reproduce_sweep.compose("f2_warmup", ["seed=3"])
    jobs = reproduce_sweep.planned_jobs(cfg, ["seed=3", "optim.lr=1e-4,2e-4,3e-4"])
    swept = reproduce_sweep.swept_values(jobs)
    assert swept["seed"] == ["3"] and len(swept["optim.lr"]) == 3
    assert len(jobs) == 2 * 3 * 2  # placements x lrs x warmups


def swept(experiment: str) -> tuple[object, list[list[str]], dict[str, list[str]]]:
    cfg = reproduce_sweep.compose(experiment, [])
    jobs = reproduce_sweep.planned_jobs(cfg, [])
    for job in (jobs[0], jobs[-1]):  # a typo in a swept key or option fails here
        reproduce_sweep.compose(experiment, job)
    return cfg, jobs, reproduce_sweep.swept_values(jobs)


@pytest.mark.parametrize("size", ["", "_gpu"])
def test_f6_sweeps_learning_rates_and_qk_norm(size: str) -> None:
    cfg, jobs, values = swept(f"f6_lr_sensitivity{size}")
    lrs = sorted(float(x) for x in values["optim.lr"])
    assert len(lrs) >= 4 and lrs[0] <= 1e-3 and lrs[-1] >= 1e-1
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert max(ratios) / min(ratios) < 1.5  # log-spaced
    assert sorted(x.lower() for x in values["model.qk_norm"]) == ["false", "true"]
    assert len(values["seed"]) >= 2
    assert "max_logit" in cfg.probes.enabled and cfg.placement.name == "pre"
    assert [float(x) for x in values["optim.z_loss"]] == [0.0, 1e-4]  # F13's arms
    assert len(jobs) == len(lrs) * 2 * 2 * len(values["seed"])
    assert cfg.trainer.accelerator == ("gpu" if size else "cpu")


@pytest.mark.parametrize("size", ["", "_gpu"])
def test_f7_sweeps_norms_and_batch_sizes_at_equal_epochs(size: str) -> None:
    experiment = f"f7_batch_stats{size}"
    cfg, _, values = swept(experiment)
    assert sorted(values["norm"]) == ["batchnorm", "layernorm", "rmsnorm"]
    assert sorted(map(int, values["data.batch_size"])) == [4, 16, 64]
    assert len(values["seed"]) >= 2 and cfg.model.name == "vit"
    images, evals = set(), set()
    for batch in values["data.batch_size"]:
        run = reproduce_sweep.compose(experiment, [f"data.batch_size={batch}"])
        images.add(run.trainer.max_steps * int(batch))
        evals.add(round(run.trainer.max_steps / run.trainer.val_check_interval))
    assert len(images) == 1, f"images seen differ across batch sizes: {images}"
    assert evals == {10}  # as many validations at every batch size: "best" is comparable
    with pytest.raises(Exception, match="at_batch"):  # a batch size without a table entry
        _ = reproduce_sweep.compose(experiment, ["data.batch_size=5"]).trainer.max_steps


@pytest.mark.parametrize("size", ["", "_gpu"])
def test_placement_study_covers_every_placement(size: str) -> None:
    cfg, _, values = swept(f"placements_depth{size}")
    assert sorted(values["placement"]) == sorted(PLACEMENTS)
    assert len(values["seed"]) >= 2 and cfg.optim.warmup_steps == cfg.trainer.max_steps // 4
    assert cfg.model.n_layer >= 12 or min(int(x) for x in values["model.n_layer"]) >= 6


@pytest.mark.parametrize(
    "experiment",
    ["placements_depth", "f3_depth", "f5_norms", "f11_admin", "vit_depth", "f9_depth_curse"],
)
@pytest.mark.parametrize("size", ["", "_gpu"])
def test_rankings_sweep_four_log_spaced_learning_rates(experiment: str, size: str) -> None:
    _, jobs, values = swept(experiment + size)
    lrs = sorted(float(x) for x in values["optim.lr"])
    ratios = {round(b / a, 6) for a, b in zip(lrs, lrs[1:], strict=False)}
    assert len(lrs) >= 4 and len(ratios) <= 2 and min(ratios) >= 3  # ~3.16x steps
    assert len(values["seed"]) >= 2


def test_cpu_sizes_fit_two_cores() -> None:
    for experiment in ("f6_lr_sensitivity", "f7_batch_stats", "placements_depth"):
        cfg = reproduce_sweep.compose(experiment, [])
        assert cfg.num_threads * cfg.hydra.launcher.n_jobs <= 2
        assert "wandb" not in cfg.logger  # CSV only at the CPU size; logger=many adds wandb


# --- exit status and verdicts from a hand-built sweep dir -----------------------------------------
