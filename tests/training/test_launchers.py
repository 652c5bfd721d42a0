"""The launcher configs run real multiruns: two tiny jobs each, one summary.json per job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import ROOT  # noqa: E402

TINY = [
    "seed=0,1",
    "model.n_layer=1",
    "model.n_embd=16",
    "model.n_head=2",
    "model.block_size=16",
    "data.batch_size=4",
    "data.val_batches=1",
    "trainer.max_steps=2",
    "optim.warmup_steps=0",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.enable_checkpointing=false",
    "logger=csv",
    "num_threads=1",
]


def multirun(launcher: str, sweep_dir: Path) -> list[dict]:
    cmd = [sys.executable, "train.py", "-m", f"hydra/launcher={launcher}", *TINY]
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [*cmd, f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]


# local_submitit is slow (11 s): the joblib case is its fast version in CI; the slurm and
# local_submitit configs compose in the fast test below.
@pytest.mark.parametrize(
    "launcher", ["local", pytest.param("local_submitit", marks=pytest.mark.slow)]
)
def test_two_job_multirun(launcher: str, tmp_path: Path) -> None:
    summaries = multirun(launcher, tmp_path / "sweep")
    assert not [p for p in (tmp_path / "sweep").rglob("*") if "%" in p.name]  # no literal %j
    assert len(summaries) == 2
    assert sorted(s["seed"] for s in summaries) == [0, 1]
    assert all(s["status"] == "completed" and s["steps"] == 2 for s in summaries)


@pytest.mark.parametrize(
    ("launcher", "target", "keys"),
    [
        ("local", "joblib_launcher.JoblibLauncher", {"n_jobs": 2}),
        ("local_submitit", "submitit_launcher.LocalLauncher", {"timeout_min": 60}),
        ("slurm", "submitit_launcher.SlurmLauncher", {"partition": None, "gpus_per_node": 1}),
    ],
)
def test_launcher_configs_compose(launcher: str, target: str, keys: dict) -> None:
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", [f"hydra/launcher={launcher}"], return_hydra_config=True)
    node = cfg.hydra.launcher
    assert node._target_.endswith(target)
    for key, value in keys.items():
        assert node[key] == value
    if launcher == "slurm":  # every documented field is a real submitit/sbatch parameter
        from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

        assert set(node) <= set(SlurmQueueConf.__dataclass_fields__)
