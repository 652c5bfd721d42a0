"""Round 5 of the hostile pass, the harness side: values that are no setting (nan, inf, trainer
values that crash), every checkpoint load checked, a damaged digest file, a full disk at the
final save, unwritable output dirs, and the small one-line refusals."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train
from runs.errors import ConfigError
from tests.conftest import ROOT
from training.errors import DiskError, one_line_errors
from training.reliability import checkpoints
from training.reliability.checkpoint_io import AtomicCheckpointIO
from training.reliability.checkpoints import (
    DamagedCheckpoint,
    digest_path,
    read_checkpoint,
)
from training.run_config import check_config

pytestmark = pytest.mark.usefixtures("one_thread")


# --- 6: every float setting finite; 17: trainer values that would crash; 18: threads ------------
@pytest.mark.parametrize(
    "override,match",
    [
        ("norm.eps=nan", r"norm\.eps must be a finite number, got nan"),
        ("norm.eps=inf", r"norm\.eps must be a finite number, got inf"),
        ("placement=deepnorm placement.alpha=nan", r"placement\.alpha must be a finite number"),
        ("optim.z_loss=inf", r"optim\.z_loss must be a finite number"),
        ("divergence.loss_factor=nan", r"divergence\.loss_factor must be a finite number"),
        ("divergence.loss_factor=inf", r"divergence\.loss_factor must be a finite number"),
        ("trainer.val_check_interval=0", r"val_check_interval=0 must be a whole number of steps"),
        ("trainer.val_check_interval=null", r"val_check_interval=None must be a whole number"),
        ("trainer.val_check_interval=-1", r"val_check_interval=-1 must be a whole number"),
        ("trainer.val_check_interval=0.5", r"val_check_interval=0.5 must be a whole number"),
        ("trainer.accumulate_grad_batches=0", r"accumulate_grad_batches=0 must be >= 1"),
        ("trainer.devices=0", r"trainer\.devices=0 must be >= 1, -1"),
        ("trainer.accelerator=tpu", r"trainer\.accelerator=tpu is not one normlab runs on"),
        ("num_threads=1000", r"num_threads must be in \[1, \d+\] \(this machine's cores\)"),
    ],
)
def test_settings_that_are_no_setting_are_one_line_before_torch(
    override, match, tiny_run, compose_cfg
):
    cfg = compose_cfg([*tiny_run, *override.split(), "run_dir=-"])
    with pytest.raises(ConfigError, match=match) as err:
        check_config(cfg, quiet=True)
    assert "\n" not in str(err.value)


def test_a_nan_divergence_factor_never_reaches_a_run(tmp_path, tiny_run, compose_cfg):
    """Through train.run too: the run records failed with the line, never 'completed'."""
    over = [*tiny_run, "divergence.loss_factor=nan", f"run_dir={tmp_path}"]
    with pytest.raises(ConfigError, match="finite"):
        train.run(compose_cfg(over))


# --- 4, 5: every load checks the digest; a digest file that cannot be read is damage --------------
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A tiny finished GPT run (its last.ckpt and digest), trained once for this module."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF, TINY_RUN

    run_dir = tmp_path_factory.mktemp("run")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*TINY_RUN, f"run_dir={run_dir}"])
    train.run(cfg)
    return run_dir


def damaged_copy(run_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "last.ckpt"
    path.write_bytes((run_dir / "last.ckpt").read_bytes())
    digest_path(path).write_bytes(digest_path(run_dir / "last.ckpt").read_bytes())
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def test_load_from_checkpoint_checks_the_digest(trained_run, tmp_path):
    from training.task import LanguageModelTask

    task = LanguageModelTask.load_from_checkpoint(trained_run / "last.ckpt", map_location="cpu")
    assert sum(p.numel() for p in task.model.parameters()) > 0
    with pytest.raises(DamagedCheckpoint, match="is damaged"):
        LanguageModelTask.load_from_checkpoint(damaged_copy(trained_run, tmp_path))


@pytest.mark.parametrize("sidecar", ["", '{"sha256": [', "not json", '{"sha256": []}'])
def test_a_digest_file_that_cannot_be_read_is_damage_not_a_pass(trained_run, tmp_path, sidecar):
    path = damaged_copy(trained_run, tmp_path)
    digest_path(path).write_text(sidecar)
    with pytest.raises(DamagedCheckpoint, match="digest file .* is empty or unreadable"):
        read_checkpoint(path)


def test_two_kills_in_the_rename_window_leave_the_intact_file_loadable(tmp_path, monkeypatch):
    """Each save is killed after its digest file is written and before the rename: the file on
    disk is still the first save's, and it must still pass."""
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "global_step": 1}, path)

    def killed(src, dst):
        raise KeyboardInterrupt  # the kill, between the digest and the rename

    monkeypatch.setattr(checkpoints.os, "replace", killed, raising=True)
    monkeypatch.setattr(checkpoints, "write_digests", fake_write_digests)
    for step in (2, 3):
        with pytest.raises(KeyboardInterrupt):
            io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": step}, path)
    monkeypatch.undo()
    assert read_checkpoint(path)["global_step"] == 1


def fake_write_digests(path: Path, digests: list[str]) -> None:
    """write_digests without its own rename (the test's kill replaces os.replace)."""
    digest_path(path).write_text(json.dumps({"sha256": digests}) + "\n")


# --- 16: the final save on a full disk keeps an honest record ------------------------------------
def test_a_full_disk_at_the_final_save_records_the_fits_steps_and_losses(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    from training.reliability.resume import ResumeCheckpoint

    real = ResumeCheckpoint.save

    def full(self, trainer, final=False, **kwargs):
        if final:
            err = OSError(errno.ENOSPC, "No space left on device")
            raise checkpoints.disk_error(err, Path(trainer.default_root_dir) / "last.ckpt")
        return real(self, trainer, final=final, **kwargs)

    monkeypatch.setattr(ResumeCheckpoint, "save", full)
    run_dir = tmp_path / "run"
    over = [*tiny_run, "checkpoint.every_n_steps=100", "checkpoint.every_s=null"]
    with pytest.raises(DiskError) as err:
        train.run(compose_cfg([*over, f"run_dir={run_dir}"]))
    assert "no checkpoint of this run is on disk yet" in str(err.value)
    assert "intact" not in str(err.value) and not (run_dir / "last.ckpt").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 3
    assert summary["final_val_loss"] is not None and summary["final_train_loss"] is not None


# --- 15: unwritable places are one line -----------------------------------------------------------
def test_an_unwritable_run_dir_on_the_command_line_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    done = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={blocker}/run"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: hydra.run.dir={blocker}/run")


def test_a_read_only_disk_mid_run_is_one_line_in_a_run_and_a_record_in_a_sweep(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    """An OSError of a read-only or full disk wherever it is raised (here: writing the .hydra
    files) ends in the one line, not a traceback."""
    from training import attempt as attempt_module

    def read_only(path, text):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(attempt_module, "write_atomic", read_only)
    cfg = compose_cfg([*tiny_run, f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(SystemExit) as exit_:
        one_line_errors(lambda c: train.run(c))(cfg)
    message = str(exit_.value)
    assert message.startswith("error: cannot write config.yaml:") and "\n" not in message
    assert "is not writable (Read-only file system)" in message


# --- 18: the small ones ---------------------------------------------------------------------------
def test_did_not_train_says_how_far_above_the_plateau_a_run_ended():
    from runs.record import did_not_train

    far = did_not_train({"status": "completed", "final_val_loss": 317.0, "unigram_loss": 3.26})
    assert far == "ended at 317.000, 314 above the unigram loss 3.260"
    near = did_not_train({"status": "completed", "final_val_loss": 3.3, "unigram_loss": 3.26})
    assert "within 0.1 of the unigram loss" in near


@pytest.mark.parametrize(
    "args,match",
    [
        (["--windows", "0"], "--windows 0 must be >= 1"),
        (["--windows", "-3"], "--windows -3 must be >= 1"),
        (["--text", "EMPTY"], "is empty; pass a file with text"),
    ],
)
def test_probe_model_arguments_name_the_fix(tmp_path, capsys, args, match):
    from scripts import probe_model

    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    text = tmp_path / "text.txt"
    text.write_text("some text " * 50)
    argv = ["gpt2", "--text", str(text), *[str(empty) if a == "EMPTY" else a for a in args]]
    with pytest.raises(SystemExit):
        probe_model.main(argv)
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and match in err and "\n" not in err


# --- 7: a search whose every trial failed ---------------------------------------------------------
def test_a_search_whose_every_trial_failed_has_no_best(tmp_path, capsys):
    from omegaconf import OmegaConf

    from training.sweep import OUTCOMES, SweepStatus

    (tmp_path / OUTCOMES).mkdir()
    for k in range(2):
        record = {"outcome": "failed", "status": "failed", "error": "ValueError: bad"}
        (tmp_path / OUTCOMES / f"{k:05d}-trial{k}.json").write_text(json.dumps(record))
    results = tmp_path / "optimization_results.yaml"
    results.write_text("name: optuna\nbest_params:\n  optim.lr: 1000.0\nbest_value: 1000000.0\n")
    target = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)},
                                         "sweeper": {"_target_": target}}})  # fmt: skip
    with pytest.raises(SystemExit):
        SweepStatus()._status_line(config)
    written = OmegaConf.load(results)
    assert written.best_params is None and written.best_value is None
    assert written.no_trial_finished is True
    assert "no trial finished" in capsys.readouterr().out


# --- 20: a script runs its own checkout's code ----------------------------------------------------
def test_a_script_imports_the_packages_of_its_own_checkout(tmp_path):
    """Another copy of the packages first on the path (another worktree's install): python
    scripts/<x>.py still runs this checkout's."""
    decoy = tmp_path / "analysis"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the other checkout')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare.py"), str(tmp_path / "missing")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert "the other checkout" not in done.stderr
    assert "is not a directory" in done.stderr + done.stdout


def test_a_full_disk_as_a_run_starts_leaves_no_empty_config_for_a_reader_to_count(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    """The disk fills while .hydra/config.yaml is written: no cut or empty config.yaml (which a
    reader would count as a run dir) and no temporary file is left, and the line is one."""
    real = Path.write_text

    def fills(self, text, *args, **kwargs):
        if self.name == "config.yaml.tmp":
            real(self, text[: len(text) // 2])
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fills)
    run_dir = tmp_path / "sweep" / "run"
    with pytest.raises(SystemExit) as exit_:
        one_line_errors(lambda c: train.run(c))(compose_cfg([*tiny_run, f"run_dir={run_dir}"]))
    monkeypatch.undo()
    assert "is full (No space left on device)" in str(exit_.value)
    assert not list((run_dir / ".hydra").glob("config.yaml*"))


def test_one_debug_switch_for_every_entry_point(monkeypatch, capsys):
    """NORMLAB_DEBUG=1 turns a script's one line and train.py's policy into the traceback."""
    from training.errors import debugging, script_errors

    def bad(argv):
        raise ValueError("a bad value; fix it")

    with pytest.raises(SystemExit):
        script_errors(bad)([])
    assert capsys.readouterr().err.strip() == "error: a bad value; fix it"
    assert not debugging({"debug": False})
    monkeypatch.setenv("NORMLAB_DEBUG", "1")
    assert debugging() and debugging({"debug": False})
    with pytest.raises(ValueError, match="a bad value"):
        script_errors(bad)([])
    with pytest.raises(ValueError, match="a bad value"):
        one_line_errors(lambda cfg: bad(cfg))({"debug": False})
