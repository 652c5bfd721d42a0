"""A signal ends a run as `interrupted` (exit 143 / 130, resumable) wherever it lands: during
the imports, the data preparation, the fit's steps (test_abuse.py) and the final
validation after the fit, where Lightning's own handlers are back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import data.tokens
import train
from tests.conftest import ROOT
from training.errors import Interrupted
from training.task import LanguageModelTask

pytestmark = pytest.mark.usefixtures("one_thread")


def raise_signal_in(monkeypatch, owner, name: str, signum: int, when=lambda *a: True) -> None:
    original = getattr(owner, name)

    def with_signal(*args, **kwargs):
        if when(*args):
            os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, with_signal)


def final_validation(task, *_):
    return task.trainer.state.fn == "validate"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_in_the_final_validation_is_interrupted_and_resumes(
    signum, tmp_path, tiny_run, compose_cfg, monkeypatch
):
    over = [*tiny_run, "trainer.max_steps=5", "checkpoint.every_n_steps=2"]  # final val: 5
    before = signal.getsignal(signum)
    raise_signal_in(monkeypatch, LanguageModelTask, "validation_step", signum, final_validation)
    with pytest.raises(Interrupted):
        train.run(compose_cfg([*over, f"run_dir={tmp_path / 'run'}"]))
    monkeypatch.undo()
    assert signal.getsignal(signum) == before
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == signum
    resumed = train.run(compose_cfg([*over, f"run_dir={tmp_path / 'run'}"]))
    reference = train.run(compose_cfg([*over, f"run_dir={tmp_path / 'ref'}"]))
    assert resumed["status"] == "completed" and resumed["resumed_from_step"] == 4
    assert resumed["final_val_loss"] == reference["final_val_loss"]


def test_a_signal_in_the_data_preparation_is_interrupted(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    over = [*tiny_run, f"data.cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}"]
    raise_signal_in(monkeypatch, data.tokens, "_build", signal.SIGINT)
    with pytest.raises(Interrupted):
        train.run(compose_cfg(over))
    monkeypatch.undo()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == signal.SIGINT
    assert not list((tmp_path / "cache").rglob("meta.json"))  # no half-built entry is trusted
    assert train.run(compose_cfg(over))["status"] == "completed"


def test_a_signal_during_the_imports_exits_143_in_one_line():
    """train.py installs the handlers first; a signal before a run dir exists (here: while
    Lightning imports) is one line and 128 + the signal number."""
    code = (
        "from training.errors import stop_on_signals; stop_on_signals()\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)\n"
        "import lightning.pytorch\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip() == "interrupted before the run started (signal 15)"
    head = (ROOT / "train.py").read_text().split("import hydra")[0]
    assert "stop_on_signals()" in head  # installed before the first heavy import
