"""Helpers more than one test file uses (test files import from here, never each other)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import models.gpt
import train
from training.errors import Interrupted

TRAIN_ENV = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def train_py(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` from the checkout, offline, its output captured."""
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "train.py", *args]
    return subprocess.run(cmd, cwd=root, env=TRAIN_ENV, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def fake_run(path: Path, config: str, metrics: str, summary: dict) -> Path:
    """A run dir as train.py leaves one: .hydra/config.yaml, metrics.csv and summary.json."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra/config.yaml").write_text(config)
    (path / "metrics.csv").write_text(metrics)
    (path / "summary.json").write_text(json.dumps(summary))
    return path


SETTINGS = {"model.name": "gpt", "placement.name": "pre", "trainer.max_steps": 30, "optim.lr": 1e-3,
            "data.batch_size": 16}  # fmt: skip


def settings_run(root: Path, name: str, seed: int, loss: float, code="abc", **changes) -> Path:
    """A finished run as train.py leaves it: summary.json with its run_config and code_version
    (``changes``: config keys; a ``summary`` mapping adds summary fields)."""
    extra = changes.pop("summary", {})
    config = {**SETTINGS, **changes}
    yaml = "".join(f"{k}: {v}\n" for k, v in {"seed": seed, **nest(config)}.items())
    summary = {
        "status": "completed", "model": "gpt", "placement": "pre", "norm": "layernorm",
        "n_layer": 2, "lr": config["optim.lr"], "seed": seed, "best_val_loss": loss,
        "final_val_loss": loss, "run_config": {**config, "seed": seed}, "code_version": code,
        **extra,
    }  # fmt: skip
    return fake_run(root / name, yaml, "step\n", summary)


def nest(flat: dict) -> dict:
    """{"a.b": 1} as the YAML flow mappings config.yaml holds: {"a": "{b: 1}"}."""
    out: dict = {}
    for key, value in flat.items():
        head, _, tail = key.partition(".")
        out.setdefault(head, {})[tail] = value
    return {k: "{" + ", ".join(f"{a}: {b}" for a, b in v.items()) + "}" for k, v in out.items()}


def sweep_out(tmp_path: Path, finding: str = "f6") -> Path:
    """A sweep dir as judge() leaves it: the verdict, the report and one of the key figures."""
    out = tmp_path / "sweep"
    (out / "report").mkdir(parents=True)
    from experiments.verdicts import verdict_stem

    stem = verdict_stem(finding)
    (out / f"{stem}.json").write_text(json.dumps({"finding": finding, "claims": []}))
    (out / f"{stem}.md").write_text(f"# {finding}\n")
    (out / "report" / "report.md").write_text("# report\n" + "x" * 100_000 + "\n")
    (out / "report" / "report.json").write_text(json.dumps({"variants": [], "pad": "y" * 100_000}))
    (out / "report" / "lr_sensitivity.png").write_bytes(b"new figure")
    return out


F2_SMALL = [
    "optim.lr=1e-3",
    "seed=0,1",
]  # F2's sweep at one rate: placement x warmup x seed, 8 jobs


def f2_runs(out: Path, overrides: list[str], failed: set[tuple[str, int]] = frozenset()) -> None:
    """The job dirs of F2's sweep under ``overrides`` as train.py leaves them; (placement,
    warmup) in ``failed``: every seed failed on a config error."""
    from experiments import sweep as reproduce_sweep

    cfg = reproduce_sweep.compose("f2_warmup", overrides)
    jobs = reproduce_sweep.planned_jobs(cfg, overrides)
    for job, name in zip(jobs, reproduce_sweep.job_dirs(cfg, jobs), strict=True):
        o = dict(item.split("=", 1) for item in job)
        placement, warmup, seed = o["placement"], int(o["optim.warmup_steps"]), int(o["seed"])
        run = out / name
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra/config.yaml").write_text(
            f"seed: {seed}\nplacement: {{name: {placement}}}\n"
            f"optim: {{lr: 1.0e-3, warmup_steps: {warmup}}}\n"
        )
        if (placement, warmup) in failed:
            summary = {"status": "failed", "error": "ValueError: a config error"}
        else:
            summary = {"status": "completed", "best_val_loss": 2.5 + 0.5 * (placement == "post")}
        (run / "summary.json").write_text(json.dumps(summary))


def metric_rows(path: Path, skip_prefix: str = "throughput/") -> dict[tuple[int, str], str]:
    """(step, metric) -> the value as written; fails on a duplicate. Throughput is wall clock."""
    out: dict[tuple[int, str], str] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key == "step" or not value or key.startswith(skip_prefix):
                    continue
                cell = (int(row["step"]), key)
                assert cell not in out, f"{cell} logged twice"
                out[cell] = value
    return out


def signal_at_step(monkeypatch, signum: int, at: int) -> None:
    """Deliver ``signum`` to this process during training step ``at`` (as SLURM or Ctrl-C)."""
    forward, calls = models.gpt.GPT.forward, {"train": 0}

    def with_signal(self, idx, targets=None):
        if self.training and targets is not None:
            if calls["train"] == at:
                os.kill(os.getpid(), signum)
            calls["train"] += 1
        return forward(self, idx, targets)

    monkeypatch.setattr(models.gpt.GPT, "forward", with_signal)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (a package importing its own submodules is none), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1 and not dep.startswith(module + "."):
                return [*path, module, dep]
            if dep not in state and (cycle := visit(dep, [*path, module])):
                return cycle
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module, [])):
            return cycle
    return None


def interrupted_and_uninterrupted(
    compose_cfg: Callable, over: list[str], tmp_path: Path, monkeypatch
) -> tuple[dict, dict]:
    """The run ``over`` describes, stopped by SIGTERM during step 2 (checkpointed at step 3) and
    resumed in tmp_path/run, and the same run without a stop in tmp_path/ref: their summaries,
    after checking that the first resumed at step 3 and that both end with the same losses."""
    signal_at_step(monkeypatch, signal.SIGTERM, at=2)
    with pytest.raises(Interrupted):
        train.run(compose_cfg([*over, f"run_dir={tmp_path / 'run'}"]))
    monkeypatch.undo()
    resumed = train.run(compose_cfg([*over, f"run_dir={tmp_path / 'run'}"]))
    reference = train.run(compose_cfg([*over, f"run_dir={tmp_path / 'ref'}"]))
    assert resumed["resumed_from_step"] == 3 and resumed["status"] == "completed"
    for key in ("final_train_loss", "final_val_loss", "best_val_loss", "steps"):
        assert resumed[key] == reference[key], key
    return resumed, reference


class DumpRankWeights:
    """A Lightning callback (``+callbacks.dump._target_=tests.helpers.DumpRankWeights``) that
    saves each rank's weights at the end of its fit, as ``<out>/rank<r>.pt``."""

    def __new__(cls, out: str):
        import torch
        from lightning.pytorch.callbacks import Callback

        class Dump(Callback):
            def on_fit_end(self, trainer, pl_module) -> None:
                state = {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()}
                torch.save(state, Path(out) / f"rank{trainer.global_rank}.pt")

        return Dump()
