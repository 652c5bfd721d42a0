"""Hydra's Ray launcher on a real local Ray cluster (conf/hydra/launcher/ray.yaml): a head and a
second node started by the test, one CPU each, so two jobs run at once on different nodes. A
4-job sweep runs; while its first two jobs train, their worker processes are killed; Ray runs
those jobs again and each resumes from its last checkpoint. Every run dir ends complete."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_RUN

pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="pip install -e '.[ray]'")
pytestmark = pytest.mark.slow  # a Ray head and node (~10 s), 4 runs of 1,200 steps, 2 at once

RAY = str(Path(sys.executable).with_name("ray"))
STEPS = 1200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster(tmp_path_factory):
    """The address of a Ray head and one more node on this machine, one CPU each."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tmp_path_factory.mktemp("r")  # short: Ray's socket paths must stay under 107 bytes
    address = f"127.0.0.1:{free_port()}"
    common = ["--num-cpus=1", "--num-gpus=0", "--disable-usage-stats"]
    head = [RAY, "start", "--head", f"--port={address.split(':')[1]}", f"--temp-dir={temp}",
            "--include-dashboard=false", *common]  # fmt: skip
    try:
        subprocess.run(head, env=env, check=True, capture_output=True, timeout=120)
        subprocess.run([RAY, "start", f"--address={address}", *common], env=env, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        yield address, env
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)


def job_pids() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "ray::_run_job"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_a_ray_cluster_sweep_completes_every_run_and_reruns_a_killed_workers_job(cluster, tmp_path):
    address, env = cluster
    out = tmp_path / "sweep"
    sweep = subprocess.Popen(
        [sys.executable, "train.py", "-m", "hydra/launcher=ray",
         f"hydra.launcher.ray.init.address={address}", *TINY_RUN, "logger=csv", "num_threads=1",
         f"trainer.max_steps={STEPS}", "trainer.val_check_interval=300",
         "checkpoint.every_n_steps=100", "seed=0,1,2,3", f"hydra.sweep.dir={out}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    killed: list[int] = []
    deadline = time.monotonic() + 240
    while not killed and sweep.poll() is None and time.monotonic() < deadline:
        # both running jobs have a checkpoint: kill their workers, as a node's failure would
        if len(list(out.glob("*/last.ckpt"))) >= 2 and len(pids := job_pids()) >= 2:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed = pids
        time.sleep(0.2)
    log, _ = sweep.communicate(timeout=600)
    assert killed, "the jobs ended before both had a checkpoint; raise STEPS\n" + log[-3000:]
    assert sweep.returncode == 0, log[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    assert [s["seed"] for s in summaries] == [0, 1, 2, 3]
    assert all(s["status"] == "completed" and s["steps"] == STEPS for s in summaries)
    resumed = [s for s in summaries if (s.get("resumed_from_step") or 0) > 0]
    assert len(resumed) >= 1, [s.get("resumed_from_step") for s in summaries]
    assert "sweep: 4 of 4 jobs done (4 completed)" in log
