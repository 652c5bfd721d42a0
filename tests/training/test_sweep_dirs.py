"""A sweep whose jobs would share a run dir is refused before any job starts; every job's
outcome is its own record, so a job refused by its dir's lock is counted, not overwritten."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra.types import RunMode
from omegaconf import OmegaConf

from tests.conftest import ROOT, TINY_RUN
from training.sweep import SweepStatus, check_distinct_dirs, sweep_jobs


def sweep_config(tmp_path, task: list[str], params: dict | None = None, num: int = 0):
    return OmegaConf.create(
        {
            "hydra": {
                "mode": RunMode.MULTIRUN,
                "sweep": {"dir": str(tmp_path)},
                "sweeper": {"params": params or {}},
                "overrides": {"task": task},
                "runtime": {"output_dir": str(tmp_path / "seed=0")},
                "job": {"num": num},
            }
        }
    )


def test_the_grid_expands_as_the_basic_sweeper_does(tmp_path):
    cfg = sweep_config(tmp_path, ["seed=0,1", "model.n_layer=2"], {"placement": "post,pre"})
    jobs = sweep_jobs(cfg)
    assert len(jobs) == 4 and ["placement=post", "seed=1", "model.n_layer=2"] in jobs
    check_distinct_dirs(jobs, {})  # distinct: no error
    with pytest.raises(SystemExit, match=r"num_threads=1, num_threads=2 of this sweep share"):
        check_distinct_dirs(sweep_jobs(sweep_config(tmp_path, ["num_threads=1,2", "seed=0"])), {})


def test_what_every_job_shares_stays_out_of_the_job_dir_names(tmp_path):
    """The overrides every job of a sweep dir's first launch gives alike are recorded in the
    dir and left out of its job names; a later launch names a constant it changes or drops;
    a dir holding runs named before such records keeps whole names."""
    from runs.jobs import CONSTANTS, constant_overrides, job_dir, sweep_constants

    jobs = [["trainer.max_steps=9", "placement=post", f"seed={s}", "num_threads=1"] for s in (0, 1)]
    constants = constant_overrides(jobs)  # the seed is always named, threads never
    assert constants == {"trainer.max_steps": "trainer.max_steps=9", "placement": "placement=post"}
    assert job_dir(jobs[1], None, constants) == "seed=1"
    assert job_dir(["trainer.max_steps=8", "seed=1"], None, constants) == (
        "placement=_unset_,seed=1,trainer.max_steps=8"
    )
    assert sweep_constants(tmp_path / "new", jobs) == constants  # not recorded unless asked
    assert not (tmp_path / "new").exists()
    assert sweep_constants(tmp_path / "new", jobs, record=True) == constants
    assert sweep_constants(tmp_path / "new", [["seed=2"]]) == constants  # the first launch's
    (tmp_path / "old" / "placement=post,seed=0").mkdir(parents=True)  # named whole before
    assert sweep_constants(tmp_path / "old", jobs, record=True) == {}
    assert (tmp_path / "old" / CONSTANTS).is_file()


def test_a_sweep_names_its_job_dirs_by_what_varies_and_a_rerun_finds_them(tmp_path):
    """train.py -m with constant overrides: the job dirs name the seed (always) and the depth
    (always), not the constants; the same command with one more seed skips the finished two."""

    def sweep(seeds: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "train.py", "-m", *TINY_RUN, f"seed={seeds}",
             f"hydra.sweep.dir={tmp_path}"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    done = sweep("0,1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name[0] != ".")
    assert names == ["model.n_layer=1,seed=0", "model.n_layer=1,seed=1"]
    done = sweep("0,1,2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"sweep {tmp_path}: 1 completed, 2 skipped" in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "model.n_layer=1,seed=2" / "summary.json").is_file()


def test_two_jobs_in_one_dir_are_both_counted(tmp_path, capsys):
    status = SweepStatus()
    for num, outcome in enumerate(({"outcome": "completed"}, {"outcome": "refused", "error": "x"})):
        cfg = sweep_config(tmp_path, [], num=num)
        status.on_job_start(cfg)
        status.on_job_end(cfg, type("Return", (), {"return_value": outcome})())
    with pytest.raises(SystemExit):
        status.on_multirun_end(sweep_config(tmp_path, []))
    out = capsys.readouterr().out
    assert "1 completed, 1 refused" in out and "refused: seed=0: x" in out


def test_a_sweep_over_an_operational_key_is_refused_before_it_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, "train.py", "-m", *TINY_RUN, "num_threads=1,2",
         f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert "share the run dir" in done.stderr + done.stdout
    assert not list(tmp_path.rglob("summary.json"))


@pytest.mark.parametrize("extra", [[], ["seed=0,1,2", "model.n_layer=3"]])
def test_the_grid_is_the_basic_sweepers_for_every_experiment(extra):
    """grid() expands with Hydra's public parser; Hydra's own (private) sweeper agrees on every
    experiment's grid, with and without command-line overrides that replace its params."""
    from pathlib import Path

    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from experiments import sweep as reproduce_sweep
    from runs.jobs import grid

    for path in sorted((Path(ROOT) / "conf" / "experiment").glob("*.yaml")):
        params = reproduce_sweep.compose(path.stem, []).hydra.sweeper.params
        args = [*(f"{k}={v}" for k, v in (params or {}).items()), *extra]
        parsed = OverridesParser.create().parse_overrides(args)
        assert grid(params, extra) == BasicSweeper.split_arguments(parsed, None)[0], path.stem


def test_a_grid_that_fails_one_check_everywhere_is_refused_once(tmp_path):
    from hydra import initialize_config_dir

    from tests.conftest import CONF
    from training.sweep import check_grid_once

    def cfg(task):
        node = sweep_config(tmp_path, task)
        node.hydra.job.config_name = "config"
        return node

    strict = ["optim.strict_warmup=true", "optim.warmup_steps=500", "trainer.max_steps=10"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        with pytest.raises(SystemExit, match=r"every job of this sweep fails the same check: "
                                             r"optim.warmup_steps=500 is longer"):  # fmt: skip
            check_grid_once(cfg([*strict, "seed=0,1,2"]))
        check_grid_once(cfg([*strict[1:], "seed=0,1"]))  # clamped with a warning: runs
        check_grid_once(
            cfg(["optim.strict_warmup=true", "optim.warmup_steps=5,500", "trainer.max_steps=10"])
        )  # fmt: skip  (one job passes)


@pytest.mark.slow  # 11 s, a 2-trial search; fast version: the sweep grid and refusal tests above
def test_an_optuna_search_minimizes_the_final_val_loss(tmp_path):
    """hparams_search=lr_warmup: each trial is a run; the search gets its final val loss back
    and the sweep's status line counts the trials as any sweep's jobs."""
    import json

    done = subprocess.run(
        [sys.executable, "train.py", "-m", "hparams_search=lr_warmup", *TINY_RUN,
         "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", "optim.warmup_steps=range(0,3)",
         f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"sweep {tmp_path}: 2 completed" in done.stdout
    losses = [json.loads(p.read_text())["final_val_loss"] for p in tmp_path.glob("*/summary.json")]
    results = (tmp_path / "optimization_results.yaml").read_text()
    assert len(losses) == 2 and f"best_value: {min(losses)}" in results


def test_a_trial_that_diverges_or_fails_is_a_bad_value_never_nan():
    """Optuna rejects NaN and the sweeper then ends the search: a diverged trial scores its loss
    at init, a failed one the documented worst value."""
    from training.sweep import WORST_OBJECTIVE, objective_value

    assert objective_value({"status": "completed", "final_val_loss": 1.5}) == 1.5
    assert objective_value({"status": "diverged", "final_val_loss": None, "init_loss": 4.2}) == 4.2
    assert objective_value({"status": "diverged", "init_loss": None}) == WORST_OBJECTIVE
    assert objective_value({"outcome": "failed"}) == WORST_OBJECTIVE
    assert (
        objective_value({"status": "completed", "final_val_loss": float("nan")}) == WORST_OBJECTIVE
    )


@pytest.mark.slow  # 15 s, a 2-trial search; fast version: the objective test above
def test_a_search_goes_on_past_a_diverged_trial(tmp_path):
    import json

    done = subprocess.run(
        [sys.executable, "train.py", "-m", "hparams_search=lr_warmup", *TINY_RUN,
         "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", "optim.warmup_steps=range(0,1)",
         "optim.lr=choice(1000.0,0.005)", f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    statuses = sorted(json.loads(p.read_text())["status"] for p in tmp_path.glob("*/summary.json"))
    assert "diverged" in statuses and (tmp_path / "optimization_results.yaml").is_file()
    assert "Traceback" not in done.stderr


def test_a_second_sweep_into_a_busy_sweep_dir_is_refused_up_front(tmp_path):
    """Two sweeps on one dir would each count the other's jobs as theirs: the second is refused
    in one line before any job starts, naming the holder."""
    from runs.dirlock import RunDirLock

    lock = RunDirLock(tmp_path, "sweep dir", "another hydra.sweep.dir")
    lock.acquire()  # held by this process, as a running sweep holds it
    try:
        done = subprocess.run(
            [sys.executable, "train.py", "-m", *TINY_RUN, "seed=0,1",
             f"hydra.sweep.dir={tmp_path}"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        lock.release()
    assert done.returncode != 0
    assert f"PID {os.getpid()}" in done.stderr and "another hydra.sweep.dir" in done.stderr
    assert not list(tmp_path.glob("*/summary.json"))  # no job ran


def test_each_job_prints_the_sweeps_progress(tmp_path, monkeypatch) -> None:
    """k of N jobs done with what they did, the minutes since the launch, and an ETA at the
    mean time of the jobs that ran (a skipped job took none)."""
    import json
    import time

    from omegaconf import OmegaConf

    from training import sweep

    jobs = tmp_path / sweep.OUTCOMES
    jobs.mkdir()
    for num, outcome in enumerate(("completed", "skipped", "unfinished")):
        (jobs / f"{num:05d}-job{num}.json").write_text(json.dumps({"outcome": outcome}))
    monkeypatch.setenv(sweep.SWEEP_JOBS, "4")
    monkeypatch.setenv(sweep.SWEEP_START, str(time.time() - 120))
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    line = sweep.progress_line(config)
    # 2 ended, 1 of them ran: 2 min for it, so ~4 min for the 2 left
    assert line == "sweep: 2 of 4 jobs done (1 completed, 1 skipped), 2.0 min, ETA ~4.0 min"
