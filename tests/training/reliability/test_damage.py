"""Damaged files and bad settings: a checkpoint that changed since it was written, a disk that
fills inside torch's zip writer, optimizer keys the optimizer does not read, values out of their
ranges, and report.md cells that would break its tables."""

from __future__ import annotations

import errno
import itertools
import json
from pathlib import Path

import pytest
import torch

import train
from runs.errors import ConfigError
from training.reliability import checkpoint_io, checkpoints
from training.reliability.checkpoint_io import AtomicCheckpointIO
from training.reliability.checkpoints import (
    DamagedCheckpoint,
    DiskError,
    read_checkpoint,
    write_digests,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def flip_byte(path: Path, at: float = 0.5) -> None:
    """Same size, one byte changed: what a rename cannot guard against."""
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_checkpoint_with_a_changed_byte_is_refused_in_one_line(tmp_path):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    state = {"state_dict": {"w": torch.arange(1000.0)}, "global_step": 3}
    io.save_checkpoint(state, path)
    assert read_checkpoint(path)["global_step"] == 3
    flip_byte(path)
    with pytest.raises(DamagedCheckpoint) as err:
        read_checkpoint(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    assert "resume=false" in str(err.value)


def test_a_kill_between_the_rename_and_the_digest_leaves_a_checkpoint_that_loads(tmp_path):
    """The digest file lists the new and the old digest while the rename is under way: a kill
    there leaves either file loadable."""
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {}, "global_step": 1}, path)
    old = checkpoints.recorded_digests(path)
    tmp = tmp_path / "new.ckpt"
    torch.save({"state_dict": {}, "global_step": 2}, tmp)
    write_digests(path, [checkpoints.file_digest(tmp), *old])  # the state just before the rename
    assert read_checkpoint(path)["global_step"] == 1
    tmp.replace(path)  # killed right after the rename
    assert read_checkpoint(path)["global_step"] == 2


def test_a_run_whose_checkpoint_was_damaged_is_refused_then_starts_fresh(
    tmp_path, tiny_run, compose_cfg
):
    run_dir = tmp_path / "run"
    over = [*tiny_run, f"run_dir={run_dir}"]
    first = train.run(compose_cfg(over))
    (run_dir / "summary.json").unlink()  # unfinished: the next attempt resumes from last.ckpt
    flip_byte(run_dir / "last.ckpt", 0.7)
    with pytest.raises(ConfigError, match="is damaged"):
        train.run(compose_cfg(over))
    assert not (run_dir / "summary.json").exists()  # the refusal wrote no record over it
    fresh = train.run(compose_cfg([*over, "resume=false"]))
    assert fresh["status"] == "completed" and fresh["final_val_loss"] == first["final_val_loss"]
    (aside,) = (run_dir / "checkpoints").glob("superseded-*")
    assert {"last.ckpt", "last.ckpt.sha256"} <= {p.name for p in aside.iterdir()}


def fill_disk_after(monkeypatch, limit: int, code: int = errno.ENOSPC) -> None:
    """Checkpoint writes (``*.tmp``) raise OSError(code) once ``limit`` bytes are written."""
    real_open = open

    class Fills:
        def __init__(self, f) -> None:
            self.f, self.written = f, 0

        def write(self, data) -> int:
            self.written += len(data)
            if self.written > limit:
                raise OSError(code, "disk full")
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fills(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return Fills(f) if "w" in mode and str(file).endswith(".tmp") else f

    monkeypatch.setattr(checkpoint_io, "open", fills, raising=False)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_inside_torchs_zip_writer_is_one_line_and_keeps_the_last_good(
    tmp_path, monkeypatch, code
):
    """torch.save turns the file's OSError into a RuntimeError about the stream; the errno
    still reaches the message, and the last good checkpoint and its digest stay."""
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.zeros(10)}, "global_step": 1}, path)
    fill_disk_after(monkeypatch, 2000, code)
    with pytest.raises(DiskError) as err:
        io.save_checkpoint({"state_dict": {"w": torch.zeros(100_000)}, "global_step": 2}, path)
    monkeypatch.undo()
    assert "\n" not in str(err.value) and "is full" in str(err.value)
    assert read_checkpoint(path)["global_step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]


def test_a_full_disk_mid_training_is_one_line_and_an_honest_record(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    """The record says failed with the disk's one line and the step the fit reached (not 0);
    train.py's error policy prints that line, not a traceback."""
    from training.errors import one_line_errors

    run_dir = tmp_path / "run"
    fill_disk_after(monkeypatch, 2000)
    over = [*tiny_run, "trainer.max_steps=4", "checkpoint.every_n_steps=2", f"run_dir={run_dir}"]
    with pytest.raises(DiskError):
        train.run(compose_cfg(over))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "is full" in summary["error"]
    assert summary["steps"] == 2  # the first checkpoint was due after step 2
    with pytest.raises(SystemExit) as exit_:
        one_line_errors(lambda cfg: train.run(cfg))(compose_cfg([*over, "resume=false"]))
    assert str(exit_.value).startswith("error: cannot write last.ckpt") and "\n" not in str(
        exit_.value
    )


# ---------------------------------------------------------------- optimizer settings
@pytest.mark.parametrize(
    ("over", "message"),
    [
        (["+optim.momentum=0.9"], r"optim.momentum is not read by optim=adamw .* optim=sgd/muon"),
        (["optim=adafactor", "+optim.eps=1e-6"], r"optim.eps is not read by optim=adafactor"),
        (["optim=adafactor", "+optim.betas=[0.9,0.99]"], r"optim.betas is not read"),
        (["optim=sgd", "optim.momentum=1.5"], r"optim.momentum must be in \[0, 1\), got 1.5"),
        (["optim=sgd", "optim.momentum=nan"], r"optim.momentum must be a finite number, got nan"),
        (["optim.weight_decay=-0.1"], r"optim.weight_decay must be >= 0"),
        (["optim.eps=0"], r"optim.eps must be > 0"),
        (["optim.betas=[0.9,1.0]"], r"optim.betas must be two values in \[0, 1\)"),
    ],
)
def test_optimizer_keys_it_does_not_read_and_values_out_of_range_are_refused(
    compose_cfg, over, message
):
    from training.run_config import typed_config

    with pytest.raises(ValueError, match=message) as err:  # the build words it as ConfigError
        typed_config(compose_cfg(over))
    assert "\n" not in str(err.value)


def test_a_run_records_only_the_settings_its_optimizer_reads(compose_cfg):
    from training.run_config import typed_config

    adamw = typed_config(compose_cfg([])).optim.read()
    sgd = typed_config(compose_cfg(["optim=sgd"])).optim.read()
    assert "momentum" not in adamw and {"betas", "eps"} <= set(adamw)
    assert {"momentum", "nesterov"} <= set(sgd) and "betas" not in sgd


# ---------------------------------------------------------------- report.md
def test_report_md_cells_with_pipes_newlines_and_html_stay_in_their_cells(tmp_path):
    from scripts import compare

    root = tmp_path / "sweep"
    for i, tag in enumerate(["a|b", "line\nbreak", "<b>bold</b>"]):
        run = root / f"run{i}"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra/config.yaml").write_text(
            f"seed: 0\nmodel: {{name: gpt}}\nnote: {json.dumps(tag)}\n"
        )
        summary = {"status": "completed", "final_val_loss": 2.0 + i, "best_val_loss": 2.0 + i}
        (run / "summary.json").write_text(json.dumps(summary))
    compare.main([str(root), "--out", str(tmp_path / "report"), "--no-wandb", "--no-plots"])
    md = (tmp_path / "report" / "report.md").read_text()
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    cells = {len(line.replace("\\|", "").split("|")) for line in table}
    assert len(cells) == 1 and len(table) == 5  # header, rule, three rows: none broken apart
    cards = [line for line in lines[start + len(table) :] if line.startswith("|")]
    assert len({len(line.replace("\\|", "").split("|")) for line in cards}) == 1  # the cards too
    assert "<b>" not in md and "&lt;b&gt;bold&lt;/b&gt;" in md and "a\\|b" in md
