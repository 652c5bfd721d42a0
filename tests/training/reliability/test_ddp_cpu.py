"""Reliability of DDP on the CPU: two processes match one with the global batch, a multirun's
DDP jobs stay in their own dirs, and a sweep rerun and extended by a seed stays one wandb group."""

from __future__ import annotations

import json
import time

import pytest

import train
from tests.helpers import metric_rows
from tests.helpers import train_py as python

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow  # 16 s, two processes; no in-process equivalent: CI's slow pass runs it
def test_ddp_two_processes_match_one_process_with_the_global_batch(tmp_path, tiny_run, compose_cfg):
    ddp = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
    ddp += ["trainer.precision=32-true", "data.batch_size=2", "data.val_batches=2"]
    start = time.monotonic()
    proc = python(*tiny_run, *ddp, f"hydra.run.dir={tmp_path / 'ddp'}")
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    # One process with both ranks' rows: per-device batch 2 x 2 ranks, the same val windows.
    single = ["data.batch_size=4", "data.val_batches=1", f"run_dir={tmp_path / 'single'}"]
    train.run(compose_cfg([*tiny_run, *single]))
    assert [p.parent.name for p in tmp_path.rglob("summary.json")].count("ddp") == 1
    assert len(list((tmp_path / "ddp").glob("*.csv"))) == 1
    ddp_rows = metric_rows(tmp_path / "ddp" / "metrics.csv")  # rank 0 only: no step twice
    one_rows = metric_rows(tmp_path / "single" / "metrics.csv")
    for key in ("train/loss", "val/loss"):
        ddp_curve = {s: float(v) for (s, k), v in ddp_rows.items() if k == key}
        one_curve = {s: float(v) for (s, k), v in one_rows.items() if k == key}
        assert ddp_curve.keys() == one_curve.keys() and ddp_curve
        assert ddp_curve == pytest.approx(one_curve, rel=1e-5, abs=1e-6), key
    print(f"ddp run: {seconds:.1f} s")


@pytest.mark.slow
def test_ddp_jobs_of_a_multirun_stay_in_their_own_dirs(tmp_path, tiny_run):
    ddp = [
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.precision=32-true",
    ]
    proc = python("-m", "placement=post,pre", *tiny_run, *ddp, f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.name for p in tmp_path.glob("[!.]*/"))  # no sweep of its own
    assert ["placement=post" in jobs[0], "placement=pre" in jobs[1]] == [True, True], jobs
    for job in jobs:
        summary = json.loads((tmp_path / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == 3
        assert (tmp_path / job / "train_ddp_process_1.log").exists()  # rank 1 joined this job


@pytest.mark.slow  # 21 s; fast versions: the job_type and group tests (tests/test_reuse.py)
def test_a_sweep_rerun_and_extended_by_a_seed_stays_one_wandb_group(tmp_path, tiny_run):
    """Run a 2-seed sweep with wandb, run it again, extend it to 3 seeds: the finished runs are
    skipped, every run is in the sweep's wandb group with one job type for all seeds (so the UI
    averages them), and the report has one variant of three seeds and its curves."""
    from analysis.report import write_report

    sweep = ["-m", *[o for o in tiny_run if not o.startswith("logger=")], "logger=many"]
    sweep += [f"hydra.sweep.dir={tmp_path}"]
    first = python(*sweep, "seed=0,1")
    assert first.returncode == 0 and f"sweep {tmp_path}: 2 completed" in first.stdout
    again = python(*sweep, "seed=0,1")
    assert again.returncode == 0 and f"sweep {tmp_path}: 2 skipped" in again.stdout
    more = python(*sweep, "seed=0,1,2")
    assert more.returncode == 0 and f"sweep {tmp_path}: 1 completed, 2 skipped" in more.stdout
    group = "sweep-" + "-".join(tmp_path.resolve().parts[-2:])
    records = sorted(tmp_path.glob("*/wandb/offline-run-*/run-*.wandb"))
    assert len(records) == 3  # one wandb run per run dir: the reruns made none
    for record in records:
        data = record.read_bytes()
        assert group.encode() in data and b"gpt-pre-layernorm-L1-lr0.005" in data  # job type
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("*/summary.json")]
    assert {s["wandb_group"] for s in summaries} == {group}
    report = write_report(tmp_path)
    (variant,) = report["variants"]
    assert variant["seeds"] == [0, 1, 2] and report["wandb_groups"] == [group]
    assert "loss_curves.png" in report["plots"]
