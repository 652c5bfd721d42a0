"""K runs per GPU across G GPUs (training/packing.py): each job takes a slot and trains on its
GPU, never more than K on one whatever order the jobs end in; computed here for G = 2 fake GPUs
and K = 2, and a packed sweep on the CPU runs every job."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest

from runs.errors import ConfigError
from tests.conftest import ROOT, TINY_RUN
from training.packing import NoFreeSlot, PackConfig, gpu_slot, overfull, packed_devices
from training.run_config import typed_config


def test_two_gpus_two_jobs_each_and_a_freed_slot_goes_to_its_gpu(tmp_path) -> None:
    pack = PackConfig(gpus=2, per_gpu=2)
    with contextlib.ExitStack() as held:
        gpus = [held.enter_context(gpu_slot(tmp_path, pack)) for _ in range(3)]
        with gpu_slot(tmp_path, pack) as fourth:
            gpus.append(fourth)
            assert packed_devices({"accelerator": "gpu", "devices": 1})["devices"] == [1]
            assert packed_devices({"accelerator": "cpu"}) == {"accelerator": "cpu"}
            with (
                pytest.raises(NoFreeSlot, match="hydra.launcher.n_jobs=4"),
                gpu_slot(tmp_path, pack),
            ):
                pass  # a fifth job at once: more than G x K
        assert gpus == [0, 0, 1, 1]
        # the job on GPU 1 (slot 3) ended: the next one takes its slot, on GPU 1, while GPU 0
        # still holds its two
        with gpu_slot(tmp_path, pack) as next_gpu:
            assert next_gpu == 1
    assert packed_devices({"accelerator": "gpu", "devices": 1}) == {"accelerator": "gpu",
                                                                   "devices": 1}  # fmt: skip


def test_k_defaults_to_the_measured_table_and_is_checked_against_the_cards_memory() -> None:
    assert PackConfig(gpus=2).k == 4 and PackConfig(gpus=2).slots == 8
    gib = 2**30
    # 4 runs of 20 GiB on an 80 GiB card: 80 > 0.9 x 80 = 72, so 3 fit (60 <= 72)
    assert overfull(4, 20 * gib, 80 * gib) == (
        "pack.per_gpu=4 runs of 20.0 GiB peak each do not fit the GPU's 80.0 GiB; "
        "set pack.per_gpu=3"
    )
    assert overfull(3, 20 * gib, 80 * gib) is None
    assert "set pack.per_gpu=1" in overfull(2, 79 * gib, 80 * gib)  # one is all there is


@pytest.mark.parametrize("over", ["pack.gpus=0", "pack.per_gpu=0", "pack.gpus=1.5"])
def test_bad_pack_values_are_one_line(over, compose_cfg) -> None:
    with pytest.raises(ConfigError, match=over.split("=")[0]):
        typed_config(compose_cfg([over]))


@pytest.mark.slow  # four tiny jobs, two at once: ~9 s; the slots themselves are tested above
def test_a_packed_sweep_runs_each_job_on_its_slots_gpu(tmp_path) -> None:
    """On the CPU the slot is taken and released as on a GPU node (the device stays the CPU):
    four jobs, two at once, two slots, every job done and no slot left held."""
    done = subprocess.run(
        [sys.executable, "train.py", "-m", *TINY_RUN, "logger=csv", "seed=0,1,2,3",
         "pack.gpus=2", "hydra/launcher=local", "hydra.launcher.n_jobs=2",
         f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads(p.read_text()) for p in tmp_path.glob("*/summary.json")]
    assert len(runs) == 4 and all(r["status"] == "completed" for r in runs)
    assert sorted(p.name for p in (tmp_path / ".slots").iterdir()) == ["0", "1"]
    with gpu_slot(tmp_path, PackConfig(gpus=2)) as gpu:  # every job let its slot go
        assert gpu == 0


def test_shards_split_the_grid_once_and_keep_their_own_state(tmp_path) -> None:
    shards = [PackConfig(gpus=1, per_gpu=2, shard=f"{i}/3") for i in range(3)]
    mine = [[j for j in range(10) if not s.elsewhere(j)] for s in shards]
    assert mine == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]  # every job once, by its number mod 3
    assert not PackConfig().elsewhere(7) and PackConfig().state_dir(tmp_path) == tmp_path
    assert shards[1].state_dir(tmp_path) == tmp_path / ".shards" / "1-of-3"
    # two array tasks on two nodes, each one GPU with K = 2: each holds its own two slots, both
    # on its GPU 0, at once (one slot folder for the sweep would leave the second task none)
    with contextlib.ExitStack() as held:
        gpus = [held.enter_context(gpu_slot(tmp_path, s)) for s in shards[:2] for _ in range(2)]
        assert gpus == [0, 0, 0, 0]
        with pytest.raises(NoFreeSlot), gpu_slot(tmp_path, shards[0]):
            pass  # a third job at once in one task: more than its K


@pytest.mark.parametrize("shard", ["2/2", "-1/2", "a/b", "3"])
def test_a_bad_shard_is_one_line(shard, compose_cfg) -> None:
    with pytest.raises(ConfigError, match="pack.shard"):
        typed_config(compose_cfg([f"pack.shard={shard}"]))


@pytest.mark.slow  # two array tasks of two tiny jobs each, at once: ~20 s
def test_two_array_tasks_share_one_sweep_dir(tmp_path) -> None:
    """scripts/slurm_pack.sbatch as two array tasks of one job array (SLURM's variables set by
    hand, the CPU trainer): both run at once into one sweep dir, each its two jobs with K = 2,
    and every run dir of the grid is complete, none run twice."""
    import os

    sweep = tmp_path / "sweep"
    tasks = [
        subprocess.Popen(
            ["bash", "scripts/slurm_pack.sbatch", str(sweep), "2", *TINY_RUN, "seed=0,1,2,3"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "SLURM_ARRAY_TASK_ID": str(i),
                "SLURM_ARRAY_TASK_COUNT": "2",
                "NORMLAB_TRAINER": "cpu",
            },
        )  # fmt: skip
        for i in range(2)
    ]
    outputs = [t.communicate(timeout=300)[0] for t in tasks]
    assert [t.returncode for t in tasks] == [0, 0], outputs
    for i, out in enumerate(outputs):
        assert f"(shard {i}/2): 2 completed" in out, out[-2000:]
    runs = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    assert sorted(r["seed"] for r in runs) == [0, 1, 2, 3]
    assert all(r["status"] == "completed" for r in runs)
