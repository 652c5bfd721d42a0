"""Reliability under abuse: one writer per run dir, safe checkpoint loading, signals, full disks,
cut metrics, settings that change a result, and names that would escape the sweep dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import models.gpt
import train
from runs.errors import ConfigError, Refused
from runs.jobs import MAX_DIR_NAME, job_dir, path_safe
from tests.conftest import ROOT  # noqa: E402
from tests.helpers import metric_rows, signal_at_step
from training.attempt import RunDirLock, fingerprint
from training.errors import Interrupted
from training.reliability.checkpoints import (
    digest_path,
    file_digest,
    read_checkpoint,
    write_digests,
)
from training.reliability.metrics_csv import keep_rows_below

pytestmark = pytest.mark.usefixtures("one_thread")


def rows_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


# ---------------------------------------------------------------- one writer per run dir


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, tiny_run, compose_cfg):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, '.'); "
         "from pathlib import Path; from training.attempt import RunDirLock; "
         f"lock = RunDirLock(Path({str(tmp_path)!r})); lock.acquire(); print('held', flush=True); "
         "time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Refused, match=rf"another process \(PID {holder.pid}\)"):
            train.run(compose_cfg([*tiny_run, f"run_dir={tmp_path}"]))
        assert not (tmp_path / "summary.json").exists()  # the refused attempt wrote nothing
    finally:
        holder.kill()
        holder.wait()
    # The OS released the dead holder's lock: the same command now runs.
    assert train.run(compose_cfg([*tiny_run, f"run_dir={tmp_path}"]))["status"] == "completed"


def test_the_lock_is_released_after_a_failed_run(tmp_path, tiny_run, compose_cfg):
    with pytest.raises(ConfigError):
        train.run(compose_cfg([*tiny_run, "model.n_head=3", f"run_dir={tmp_path}"]))
    lock = RunDirLock(tmp_path)
    lock.acquire()  # would raise if the failed attempt still held it
    lock.release()


# ---------------------------------------------------------------- checkpoints


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_crafted_checkpoint_cannot_run_code(tmp_path, tiny_run, compose_cfg):
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "global_step": 1, "payload": RunsCode()}, path)
    with pytest.raises(ValueError, match="no digest file"):  # refused before any unpickling
        read_checkpoint(path)
    # With a digest that matches (a crafted file and a crafted digest), torch's weights-only
    # loader still refuses it.
    write_digests(path, [file_digest(path)])
    with pytest.raises(ValueError, match="unreadable or unsafe"):
        read_checkpoint(path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.replace(path, run_dir / "last.ckpt")  # the auto-resume path reads it too
    os.replace(digest_path(path), digest_path(run_dir / "last.ckpt"))
    with pytest.raises(ConfigError, match="unsafe"):
        train.run(compose_cfg([*tiny_run, f"run_dir={run_dir}"]))
    assert not (ROOT / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_ckpt_path_into_a_finished_run_sets_it_aside(tmp_path, tiny_run, compose_cfg):
    first = train.run(compose_cfg([*tiny_run, f"run_dir={tmp_path / 'a'}"]))
    train.run(compose_cfg([*tiny_run, f"run_dir={tmp_path / 'b'}"]))
    ckpt = tmp_path / "b" / "last.ckpt"
    again = train.run(compose_cfg([*tiny_run, f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'a'}"]))
    assert again["resumed_from_step"] == 3 and again["status"] == "completed"
    (aside,) = (tmp_path / "a" / "checkpoints").glob("superseded-*")
    assert json.loads((aside / "summary.json").read_text())["wall_s"] == first["wall_s"]
    # Another learning rate cannot continue that checkpoint under its own label.
    with pytest.raises(Refused, match=r"optim\.lr: 0\.005 -> 0\.01"):
        over = [*tiny_run, "optim.lr=0.01", f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'c'}"]
        train.run(compose_cfg(over))


def test_metrics_cut_in_the_middle_keep_their_good_rows(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("a,step\n1,0\n2,1\n3,2,9,9\n\x00\x00garbage\n4,3\n5,4\n")
    assert keep_rows_below(path, 4) == ["a", "step"]
    assert rows_of(path) == ["a,step", "1,0", "2,1", "4,3"]


# ---------------------------------------------------------------- settings that change a result


def test_precision_is_part_of_the_fingerprint(tmp_path, tiny_run, compose_cfg):
    cfg = compose_cfg([*tiny_run, f"run_dir={tmp_path}"])
    assert fingerprint(cfg)["trainer.precision"] == "32-true"
    train.run(cfg)
    bf16 = compose_cfg([*tiny_run, "trainer.precision=bf16-mixed", f"run_dir={tmp_path}"])
    with pytest.raises(Refused, match=r"trainer\.precision: 32-true -> bf16-mixed"):
        train.run(bf16)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["threads"] == 1  # the thread count is recorded with the result


def test_names_that_become_paths_stay_inside_the_sweep_dir():
    assert path_safe("../../etc/x") == "_.._.._etc_x" and "/" not in path_safe("/abs/path")
    assert path_safe("gpt-pre-layernorm-L6-lr0.005-s0") == "gpt-pre-layernorm-L6-lr0.005-s0"
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", ["optim.schedule=../../escape"], return_hydra_config=True)
    # one directory name, below the sweep
    assert cfg.hydra.sweep.subdir == "model.n_layer=2,optim.schedule=.._.._escape,seed=0"


def test_sweep_job_dirs_are_named_by_what_the_job_runs():
    config = OmegaConf.create({"seed": 0, "model": {"n_layer": 6}})
    overrides = ["placement=post", "seed=1", "experiment=f3_depth", "num_threads=1", "logger=csv"]
    overrides += ["+probes.every.grad_norm=10", "hydra.launcher.n_jobs=2", "trainer.max_steps=9"]
    # sorted; threads, loggers, probes and hydra's own settings left out; the depth from config
    expected = "experiment=f3_depth,model.n_layer=6,placement=post,seed=1,trainer.max_steps=9"
    assert job_dir(overrides, config) == expected
    # no seed or depth on the command line names the same dir as their config values do
    assert job_dir(["placement=post"], config) == job_dir(["placement=post", "seed=0"], config)
    assert job_dir(["placement=post"], config) == "model.n_layer=6,placement=post,seed=0"
    # names past MAX_DIR_NAME keep their start and a digest of the whole: still distinct
    long = [f"+extra.key_{i}=value_{i}" for i in range(20)]
    a, b = job_dir(long, config), job_dir([*long[:-1], "+extra.key_19=other"], config)
    assert len(a) == len(b) == MAX_DIR_NAME and a != b and a.startswith("+extra.key_0=value_0,")


# ---------------------------------------------------------------- signals


@pytest.mark.parametrize(
    "signum,at",  # the step boundary after step 3 is a validation step (every 2), after 4 not
    [(signal.SIGTERM, 3), (signal.SIGINT, 4)],
    ids=["TERM-at-val-step", "INT-between"],
)
def test_a_signal_checkpoints_at_the_step_boundary_and_a_rerun_resumes(
    signum, at, tmp_path, tiny_run, compose_cfg, monkeypatch
):
    over = [*tiny_run, "trainer.max_steps=8", "checkpoint.every_n_steps=100"]
    before = signal.getsignal(signum)  # SIG_IGN where the tests run in a background job
    signal_at_step(monkeypatch, signum, at=at)
    with pytest.raises(Interrupted):
        train.run(compose_cfg([*over, f"run_dir={tmp_path / 'run'}"]))
    monkeypatch.undo()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == signum
    ckpt = torch.load(tmp_path / "run" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == at + 1
    assert signal.getsignal(signum) == before  # handlers restored
    resumed = train.run(compose_cfg([*over, f"run_dir={tmp_path / 'run'}"]))
    reference = train.run(compose_cfg([*over, f"run_dir={tmp_path / 'ref'}"]))
    assert resumed["resumed_from_step"] == at + 1 and resumed["status"] == "completed"
    for key in ("final_train_loss", "final_val_loss", "best_val_loss", "steps"):
        assert resumed[key] == reference[key], key
    expected = metric_rows(tmp_path / "ref" / "metrics.csv")
    assert metric_rows(tmp_path / "run" / "metrics.csv") == expected  # every row once, bit for bit


def test_a_resumed_run_that_diverges_sets_its_checkpoint_aside(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    over = [*tiny_run, "trainer.max_steps=8", f"run_dir={tmp_path}"]
    signal_at_step(monkeypatch, signal.SIGTERM, at=2)
    with pytest.raises(Interrupted):
        train.run(compose_cfg(over))
    monkeypatch.undo()
    assert (tmp_path / "last.ckpt").exists()
    forward = models.gpt.GPT.forward

    def nan_loss(self, idx, targets=None):
        logits, loss = forward(self, idx, targets)
        return logits, (loss * float("nan") if self.training and targets is not None else loss)

    monkeypatch.setattr(models.gpt.GPT, "forward", nan_loss)
    summary = train.run(compose_cfg(over))
    assert summary["status"] == "diverged" and summary["diverged_at_step"] == 3
    assert summary["steps"] == 3 and summary["best_val_loss"] is not None
    assert not (tmp_path / "last.ckpt").exists() and (tmp_path / "last.diverged.ckpt").exists()


def test_sigterm_from_outside_exits_143_and_the_same_command_resumes(tmp_path, tiny_run):
    cmd = [sys.executable, "train.py", *tiny_run, "trainer.max_steps=400", "optim.warmup_steps=2"]
    cmd += ["logger.csv.flush_logs_every_n_steps=1", f"hydra.run.dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "metrics.csv").exists() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err.decode()[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    step = torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"]
    assert summary["status"] == "interrupted" and 0 < step < 400
    assert not list(tmp_path.glob("*.tmp"))


def test_a_killed_reproduce_takes_its_sweep_with_it(tmp_path):
    """reproduce.py starts the sweep with a parent-death signal: SIGKILL the parent, and the
    child (here a sleeper standing in for `train.py -m`) is terminated too."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; sys.path.insert(0, '.'); "
         "from experiments.sweep import die_with_parent; "
         "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
         "preexec_fn=die_with_parent); "
         f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)"],
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # the imports, on a busy machine
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int(pid_file.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{child}") and "Z" not in status_of(child):
            assert time.monotonic() < deadline, "the sweep outlived reproduce.py"
            time.sleep(0.05)
    finally:
        parent.kill()


@pytest.mark.slow  # 10 s, a process tree; fast versions: the in-process tests of test_signals.py
def test_a_killed_parallel_sweep_interrupts_its_workers(tmp_path, tiny_run):
    """SIGKILL a joblib sweep's own process while its jobs train: each worker process follows
    it (a parent-death SIGTERM) and stops at a step boundary, interrupted, its checkpoint kept;
    none trains on as an orphan."""
    long = [o for o in tiny_run if not o.startswith("trainer.max_steps")]
    sweep = [sys.executable, "train.py", "-m", *long, "trainer.max_steps=100000", "seed=0,1"]
    sweep += ["hydra/launcher=local", "checkpoint.every_n_steps=5", f"hydra.sweep.dir={tmp_path}"]
    proc = subprocess.Popen(sweep, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*/last.ckpt"))) < 2:  # both jobs are training
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.2)
        workers = [p for p in children_of(proc.pid) if "loky" in cmdline(p)]
        assert len(workers) >= 2
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60
        while any(os.path.exists(f"/proc/{p}") and "Z" not in status_of(p) for p in workers):
            assert time.monotonic() < deadline, "a worker trained on after its sweep died"
            time.sleep(0.2)
    finally:
        proc.kill()
        for p in children_of(proc.pid):
            os.kill(p, signal.SIGKILL)
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("*/summary.json")]
    assert [s["status"] for s in summaries] == ["interrupted", "interrupted"]


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def status_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "Z"
