"""Optuna across processes: two workers of one lr/warmup search share a study in an SQLite
storage (each in a sweep dir of its own, each with its own sampler seed): every trial of both
is in the study once, completed, and is one run dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, TINY_RUN

pytestmark = pytest.mark.slow  # two searches of two trials each, at once: ~20 s


def worker(storage: str, out: Path, seed: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "train.py", "-m", "hparams_search=lr_warmup", *TINY_RUN, "logger=csv",
         "optim.strict_warmup=false", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1",
         f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=shared",
         f"hydra.sweeper.sampler.seed={seed}", f"hydra.sweep.dir={out}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_two_workers_share_one_sqlite_study_without_losing_or_repeating_a_trial(tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    # the study exists before the workers start (each would otherwise race to create it)
    optuna.create_study(study_name="shared", storage=storage, direction="minimize")
    procs = [worker(storage, tmp_path / f"worker{k}", seed=k) for k in (0, 1)]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    trials = optuna.load_study(study_name="shared", storage=storage).trials
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    runs = []
    for path in sorted(tmp_path.glob("worker*/*/summary.json")):
        config = yaml.safe_load((path.parent / ".hydra" / "config.yaml").read_text())
        summary = json.loads(path.read_text())
        runs.append((config["optim"]["lr"], summary["final_val_loss"]))
    assert len(runs) == 4  # one run dir per trial, none twice
    for t in trials:  # each trial's params and value are one run's
        matches = [r for r in runs if r[0] == pytest.approx(t.params["optim.lr"])]
        assert len(matches) == 1 and matches[0][1] == pytest.approx(t.value)
