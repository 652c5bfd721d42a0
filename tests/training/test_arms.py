"""A sweep's arms: a key that acts under some options of a group (or some connections) only is
that arm's in a sweep across them: said once, and the other arms' jobs run and record without
it; every swept key names the run (header line, progress bar, wandb) and no refused launch
leaves anything in its sweep dir."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, TINY_RUN
from training.arms import inapplicable
from training.launch import preflight
from training.loggers import job_type, run_name
from training.run_config import typed_config


def test_an_arms_key_in_a_sweep_across_the_group_is_said_once_and_added_for_every_job(capsys):
    args = ["-m", "param=sp,mup,completep", "param.base_width=32", "model.n_embd=32,64"]
    assert preflight(args) == ["-m", "param=sp,mup,completep", "++param.base_width=32",
                               "model.n_embd=32,64"]  # fmt: skip
    err = capsys.readouterr().err
    assert err == (
        "note: param.base_width applies to param=mup,completep; the jobs with param=sp run "
        "without it\n"
    )
    args = ["-m", "model.connection=residual,hc", "model.streams=4"]
    assert preflight(args) == args  # every model option has the key: no ++ needed
    assert "model.streams applies to model.connection=hc;" in capsys.readouterr().err


def test_a_job_drops_exactly_the_keys_its_arm_does_not_use():
    over = ["param=sp", "++param.base_width=32", "model.streams=4", "model.sinkhorn_iters=5"]
    # the connection from the config, not the command line: its keys are the model's to check
    assert inapplicable(over, {"param": "sp"}, "residual") == ["param.base_width"]
    over.append("model.connection=residual")  # a job of a sweep across connections
    assert inapplicable(over, {"param": "sp"}, "residual") == [
        "param.base_width", "model.streams", "model.sinkhorn_iters"]  # fmt: skip
    assert inapplicable(over, {"param": "mup"}, "hc") == ["model.sinkhorn_iters"]
    assert inapplicable(over, {"param": "mup"}, "mhc") == []


def test_a_connection_key_no_connection_of_the_command_line_uses_is_refused():
    with pytest.raises(SystemExit, match=r"model.streams acts under model.connection=hc/shc/mhc"):
        preflight(["-m", "model.connection=residual", "model.streams=4", "seed=0,1"])


def test_run_names_carry_every_swept_key_so_no_two_jobs_share_one(compose_cfg):
    """A sweep of param x width x lr: the names (header, progress bar, wandb) and job types are
    unique, and name only the keys the jobs vary (the template's own keys once)."""
    names, types = set(), set()
    for param in ("sp", "mup"):
        for width in (32, 64):
            over = [f"param={param}", f"model.n_embd={width}", "optim.lr=0.01"]
            run = typed_config(compose_cfg([*over, "++param.base_width=32"] if param == "mup"
                                           else over))  # fmt: skip
            names.add(run_name(run, [f"param={param}", f"model.n_embd={width}"]))
            types.add(job_type(run, [f"param={param}", f"model.n_embd={width}"]))
    assert len(names) == len(types) == 4
    assert "gpt-pre-layernorm-L2-lr0.01-n_embd=64-param=mup-s0" in names


def sweep(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", "-m", *TINY_RUN, "logger=csv", *args,
         f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_sweep_across_param_runs_each_arm_with_its_own_keys(tmp_path):
    done = sweep(tmp_path / "s", "param=sp,mup", "param.base_width=16")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("note: param.base_width applies to param=mup") == 1
    configs = {
        d.name: json.loads((d / "summary.json").read_text())["run_config"]
        for d in (tmp_path / "s").iterdir() if (d / "summary.json").is_file()
    }  # fmt: skip
    sp = [c for c in configs.values() if c["param.name"] == "sp"]
    mup = [c for c in configs.values() if c["param.name"] == "mup"]
    assert len(sp) == len(mup) == 1
    assert "param.base_width" not in sp[0] and mup[0]["param.base_width"] == 16
    headers = [line.split(":")[0] for line in done.stdout.splitlines() if "tokens/step" in line]
    assert sorted(headers) == ["gpt-pre-layernorm-L1-lr0.005-param=mup-s0",
                               "gpt-pre-layernorm-L1-lr0.005-param=sp-s0"]  # fmt: skip


def test_a_refused_sweep_leaves_no_sweep_dir(tmp_path):
    """Every job fails the same check (or Hydra cannot compose any): refused once, and the
    sweep dir records nothing (no .constants.json to rename a later launch's runs)."""
    done = sweep(tmp_path / "s", "model.n_layer=1,2", "model.n_head=5")
    assert done.returncode == 1 and "every job of this sweep fails the same check" in done.stderr
    assert not (tmp_path / "s").exists()
