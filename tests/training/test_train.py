"""Configs and the training entry point, against hand-computed numbers (the optimizers and
schedules: tests/training/test_schedules.py)."""

from __future__ import annotations

import csv
import inspect
import json
import math
import shutil
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.utils.data import DataLoader

import models.gpt
import train
from models.catalog import NORMS
from models.config import NormConfig, PlacementConfig
from models.gpt import GPT, GPTConfig
from models.placement import PLACEMENTS
from runs.checks import node_to
from runs.errors import ConfigError
from runs.summary import problems as summary_problems
from tests.conftest import (
    ROOT,  # noqa: E402
    TINY_RUN,
)
from training.build import allow_tf32
from training.init_probe import measure_at_init
from training.loggers import SECTIONS, STEP_AXIS, define_wandb_metrics, finish_wandb
from training.optim import OPTIMIZERS
from training.optim_config import OptimConfig, read_optim
from training.probe_config import ProbeConfig
from training.sections import DivergenceConfig, gpu_accelerator
from training.specs import MODELS
from training.task import LanguageModelTask

CONF = ROOT / "conf"
GROUPS = ("model", "placement", "norm", "data", "optim", "trainer", "logger")
# conftest's tiny run, with the default context, val batches and loggers
TINY = [o for o in TINY_RUN if not o.startswith(("model.block_size", "data.val_b", "logger="))]
PROBE_COLUMNS = ("grad_norm/total", "act_norm/layer_0", "update/model", "attn/max_logit")
pytestmark = pytest.mark.usefixtures("one_thread")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def without(node: DictConfig, *keys: str) -> DictConfig:
    return OmegaConf.masked_copy(node, [k for k in node if k not in keys])


def compose_cfg(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize(
    "group,option", [(g, o) for g in GROUPS for o in options(g)], ids=lambda v: str(v)
)
def test_every_option_composes_and_builds_its_dataclass(group, option):
    kind = OmegaConf.load(CONF / group / f"{option}.yaml").get("kind")
    extra = ["model=vit"] if kind == "image" else []
    cfg = compose_cfg([f"{group}={option}", *extra])
    assert cfg[group] is not None
    spec = MODELS[cfg.model.name]
    # Every key of the model-facing groups must be a field of their sub-configs.
    node_to(PlacementConfig, cfg.placement, "placement")
    node_to(NormConfig, cfg.norm, "norm")
    node_to(dict, cfg.model, "model", drop=("name", "init_from"), fields_of=spec.config)
    node_to(spec.data_config, cfg.data, "data", drop=("kind", "batch_size"))
    read_optim(cfg.optim, cfg.optim.warmup_steps)
    node_to(ProbeConfig, cfg.probes, "probes")
    node_to(DivergenceConfig, cfg.divergence, "divergence")
    trainer_args = set(inspect.signature(L.Trainer.__init__).parameters)
    assert set(cfg.trainer) <= trainer_args, set(cfg.trainer) - trainer_args


def test_config_groups_cover_the_registries():
    # every placement has its option, and every option selects a registered placement (peri is
    # sandwich's other name)
    assert set(PLACEMENTS) <= set(options("placement"))
    selected = {compose_cfg([f"placement={o}"]).placement.name for o in options("placement")}
    assert selected == set(PLACEMENTS)
    assert set(options("norm")) == set(NORMS)
    assert set(options("model")) == set(MODELS)


def test_model_vit_switches_to_digits_and_data_stays_overridable():
    assert compose_cfg([]).data.source == "pydocs"
    assert compose_cfg(["model=vit"]).data.source == "digits"
    assert compose_cfg(["model=vit", "data=hf_image"]).data.source == "hf_image"


def test_unknown_placement_lists_the_choices():
    with pytest.raises(HydraException) as err:
        compose_cfg(["placement=prenorm"])
    assert all(name in str(err.value) for name in ("post", "pre", "deepnorm"))


def test_unknown_key_and_wrong_data_kind_fail_with_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.n_layers .*valid keys: .*n_layer"):
        train.run(compose_cfg([*TINY, "+model.n_layers=3", f"run_dir={tmp_path}"]))
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"
    with pytest.raises(ConfigError, match="model=gpt trains on text data"):
        train.run(compose_cfg([*TINY, "data=digits", f"run_dir={tmp_path}"]))


# ---------------------------------------------------------------- optimizer and schedule
def test_gpu_speed_settings_stay_off_the_cpu(monkeypatch):
    """Fused AdamW and TF32 are for GPUs: on CPU parameters and accelerators nothing changes."""
    model = nn.Linear(4, 4)
    opt = OPTIMIZERS["adamw"](model, OptimConfig())
    assert opt.defaults["fused"] is None and len(opt.param_groups) == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        for accelerator in ("cpu", "auto"):
            allow_tf32(gpu_accelerator(accelerator))
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        allow_tf32(gpu_accelerator("gpu"))
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_fused_adamw_is_an_opt_in_on_the_cpu_that_matches_the_default_step():
    """optim.fused=true takes torch's fused AdamW on the CPU; its losses follow the default
    (foreach) step's to float rounding; false never fuses; SGD refuses the key."""
    cfg = GPTConfig(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)
    idx = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(0))
    losses = {}
    for fused in (None, True, False):
        torch.manual_seed(0)
        model = GPT(cfg)
        opt = OPTIMIZERS["adamw"](model, OptimConfig(fused=fused, lr=1e-3))
        assert opt.defaults["fused"] is (True if fused else None)
        losses[fused] = []
        for _ in range(10):
            loss = model(idx, idx)[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[fused].append(loss.item())
    assert losses[None] == losses[False]
    assert max(abs(a - b) for a, b in zip(losses[True], losses[None], strict=True)) < 1e-5
    assert losses[None][0] - losses[None][-1] > 0.01  # the steps moved the model
    with pytest.raises(ConfigError, match="optim.fused is not read by optim=sgd"):
        read_optim(compose_cfg(["optim=sgd", "+optim.fused=true"]).optim, 0)


def test_non_finite_loss_stops_cleanly_as_diverged():
    class NaNAfterTwo(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.calls = nn.Parameter(torch.ones(1)), 0

        def forward(self, x, y):
            self.calls += 1
            loss = (self.w * x).mean() * (math.nan if self.calls > 2 else 1.0)
            return None, loss

    batches = DataLoader([(torch.ones(2, 3), torch.ones(2, 3))] * 10, batch_size=None)
    task = LanguageModelTask(NaNAfterTwo(), OptimConfig(), total_steps=10)
    trainer = L.Trainer(
        max_steps=10,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(task, train_dataloaders=batches)
    # Step 2 is counted but changes nothing (no gradient); the trainer stops right after it.
    assert (task.status, task.diverged_at_step, trainer.global_step) == ("diverged", 2, 3)
    assert torch.isfinite(task.model.w).all()


# ---------------------------------------------------------------- the entry point


def read_metrics(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("model", ["gpt", "vit"])
def test_run_writes_the_run_dir(model, tmp_path):
    extra = ["model.block_size=16", "data.val_batches=1"] if model == "gpt" else []
    cfg = compose_cfg([f"model={model}", *TINY, *extra, f"run_dir={tmp_path}"])
    summary = train.run(cfg)

    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk.pop("run_config") == summary["run_config"]  # what a rerun is checked against
    assert on_disk.pop("derived") == summary["derived"]
    nested = ("run_config", "derived")
    assert on_disk == pytest.approx({k: v for k, v in summary.items() if k not in nested})
    fields = [
        "status",
        "model",
        "placement",
        "norm",
        "n_layer",
        "n_embd",
        "lr",
        "warmup_steps",
        "seed",
        "steps",
        "diverged_at_step",
        "final_train_loss",
        "final_val_loss",
        "best_val_loss",
        "wall_s",
        "run_dir",
        "params",
    ]
    fields += ["best_val_acc", "samples_per_s"] if model == "vit" else ["tokens_per_s"]
    assert set(fields) <= set(summary)
    assert summary_problems(on_disk) == []  # every field declared in runs/summary.py
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert summary["diverged_at_step"] is None and summary["model"] == model
    assert math.isfinite(summary["final_val_loss"]) and summary["best_val_loss"] is not None
    assert (tmp_path / "last.ckpt").is_file()
    assert (tmp_path / "vocab.json").is_file() == (model == "gpt")
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    assert "wandb_group" in summary and summary["wandb_group"] is None  # one run: no group

    rows = read_metrics(tmp_path / "metrics.csv")
    train_rows = {int(r["step"]): r for r in rows if r["train/loss"]}
    val_steps = [int(r["step"]) for r in rows if r["val/loss"]]
    assert sorted(train_rows) == [0, 1, 2] and val_steps == [2, 3]  # in fit, then final weights
    for step, row in train_rows.items():  # warmup lr: lr * (step + 1) / warmup_steps
        assert float(row["lr"]) == pytest.approx(cfg.optim.lr * min(step + 1, 2) / 2, rel=1e-6)
    # The stability probes are wired in: every probe kind has a column and a finite value.
    assert set(PROBE_COLUMNS) <= set(rows[0])
    for column in PROBE_COLUMNS:
        values = [float(r[column]) for r in rows if r[column]]
        assert values and all(math.isfinite(v) for v in values), column
    assert [int(r["step"]) for r in rows if r["grad_norm/total"]] == [0, 1, 2]  # every step


def test_compile_asks_torch_for_the_mode_the_config_names(tmp_path, monkeypatch):
    """The fast version of the check below: compile=true reaches nn.Module.compile with the
    default mode, compile=false compiles nothing (the compiler itself stubbed out)."""
    modes = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, *a, **kw: modes.append(kw.get("mode")))
    over = [*TINY, "logger=csv", "trainer.max_steps=2", "model.block_size=16", "data.val_batches=1"]
    for mode in ("false", "true"):
        train.run(compose_cfg([*over, f"compile={mode}", f"run_dir={tmp_path / mode}"]))
    assert modes == ["default"]
    with pytest.raises(ConfigError, match="compile='fast' is not a torch.compile mode"):
        train.run(compose_cfg([*over, "compile=fast", f"run_dir={tmp_path / 'bad'}"]))


@pytest.mark.slow  # 30 s of inductor compiling; the plumbing: the test above
@pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")),
    reason="torch.compile on CPU needs a C++ compiler",
)
def test_compile_trains_like_eager(tmp_path, monkeypatch):
    modes, compile_ = [], nn.Module.compile

    def spy(self, *args, **kwargs):
        modes.append(kwargs.get("mode"))
        return compile_(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "compile", spy)
    over = [*TINY, "logger=csv", "trainer.max_steps=4", "model.block_size=16", "data.val_batches=1"]
    over.append("norm=rmsnorm")  # on CPU normlab's own fused kernel: a custom op, compiled too
    losses = {}
    for mode in ("false", "true"):
        train.run(compose_cfg([*over, f"compile={mode}", f"run_dir={tmp_path / mode}"]))
        rows = read_metrics(tmp_path / mode / "metrics.csv")
        losses[mode] = [float(r[k]) for k in ("train/loss", "val/loss") for r in rows if r[k]]
    assert modes == ["default"]  # the eager run compiled nothing, `true` the default mode
    assert len(losses["true"]) == 4 + 2  # every step, validation at step 2 and at the end
    assert losses["true"] == pytest.approx(losses["false"], rel=1e-4)
    with pytest.raises(ConfigError, match="compile='fast' is not a torch.compile mode"):
        train.run(compose_cfg([*over, "compile=fast", f"run_dir={tmp_path / 'bad'}"]))


# ---------------------------------------------------------------- stability instruments


def test_absurd_learning_rate_ends_as_diverged_with_exit_code_0(tmp_path):
    over = [*TINY, "logger=csv", "trainer.max_steps=20", "optim.lr=300", "optim.warmup_steps=0"]
    cfg = compose_cfg([*over, "model.block_size=16", "data.val_batches=1", f"run_dir={tmp_path}"])
    assert train.main(cfg)["outcome"] == "diverged"  # returns: the process exits with code 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    step = summary["diverged_at_step"]
    assert summary["status"] == "diverged" and isinstance(step, int) and 0 < step < 19
    assert summary["steps"] == step  # the healthy steps; nothing after the diverged one runs
    assert summary["divergence_reason"]
    assert not (tmp_path / "last.ckpt").exists()  # no checkpoint that looks like a good model
    rows = read_metrics(tmp_path / "metrics.csv")
    assert max(int(r["step"]) for r in rows if r["train/loss"]) == step


def test_injected_non_finite_loss_stops_at_that_step(tmp_path, monkeypatch):
    forward, calls = GPT.forward, {"train": 0}

    def nan_at_step_3(self, idx, targets=None):
        logits, loss = forward(self, idx, targets)
        if self.training and targets is not None:  # training steps only, not probes or val
            calls["train"] += 1
            if calls["train"] == 4:  # the 4th training forward is step 3
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(models.gpt.GPT, "forward", nan_at_step_3)
    over = [*TINY, "logger=csv", "trainer.max_steps=8", "model.block_size=16", "data.val_batches=1"]
    summary = train.run(compose_cfg([*over, f"run_dir={tmp_path}"]))
    # steps: the healthy steps before the diverged one
    assert (summary["status"], summary["diverged_at_step"], summary["steps"]) == ("diverged", 3, 3)
    rows = read_metrics(tmp_path / "metrics.csv")
    losses = {int(r["step"]): float(r["train/loss"]) for r in rows if r["train/loss"]}
    assert sorted(losses) == [0, 1, 2, 3] and math.isnan(losses[3])
    assert summary["final_train_loss"] == pytest.approx(losses[2])  # the last finite loss


def test_init_probe_measures_real_batches_without_training(tmp_path):
    from scripts import init_probe as init_probe_script

    over = [
        "model.n_embd=32",
        "model.n_head=2",
        "model.block_size=16",
        "init_probe.placements=[post,pre]",
        "init_probe.depths=[1,3]",
        "init_probe.seeds=[0]",
        "init_probe.batches=2",
        "init_probe.batch_size=2",
        "num_threads=1",
        f"run_dir={tmp_path}",
    ]
    cfg = compose_cfg(over)
    assert init_probe_script.main(cfg)["outcome"] == "completed"
    summary = json.loads((tmp_path / "summary.json").read_text())
    probe = json.loads((tmp_path / "probe.json").read_text())
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "completed" and on_disk["steps"] == 0
    assert on_disk["runs"] == probe["runs"] and summary["depth_slopes"] == probe["depth_slopes"]
    assert [(r["placement"], r["n_layer"]) for r in probe["runs"]] == [
        ("post", 1),
        ("post", 3),
        ("pre", 1),
        ("pre", 3),
    ]
    assert probe["k_batches"] == 2 and probe["batch_shape"] == [2, 16]
    assert not (tmp_path / "last.ckpt").exists() and not (tmp_path / "metrics.csv").exists()
    # Independently: the same model at init on the datamodule's first two train batches.
    from data.config import TextDataConfig
    from data.text import TextDataModule

    dm = TextDataModule(TextDataConfig(), block_size=16, batch_size=4, seed=0)
    dm.setup()
    torch.manual_seed(0)
    model = GPT(models.gpt.GPTConfig(**{**probe["config"], "placement": "pre", "n_layer": 3}))
    norms = [measure_at_init(model, *dm.train_batch(s, 2))["grad_norm/fc2"][-1] for s in (0, 1)]
    assert probe["runs"][3]["last_fc2_grad_norm"]["mean"] == pytest.approx(sum(norms) / 2)


class FakeWandbRun:
    def __init__(self) -> None:
        self.defined: dict[str, dict] = {}
        self.summary: dict = {}

    def define_metric(self, name: str, **kwargs) -> None:
        self.defined[name] = kwargs


def test_wandb_metrics_share_the_step_axis_and_summarize_the_best():
    run = FakeWandbRun()
    define_wandb_metrics(run)
    for section in ("grad_norm", "act_norm", "update", "attn", "train", "val"):
        assert section in SECTIONS
        assert run.defined[f"{section}/*"]["step_metric"] == STEP_AXIS
    assert run.defined["val/loss"] == {"step_metric": STEP_AXIS, "summary": "min"}
    assert run.defined["val/acc"]["summary"] == "max"
    # Metric names fall into exactly these sections: the prefix before the first "/".
    assert {c.split("/")[0] for c in PROBE_COLUMNS} <= set(SECTIONS)


def test_finish_wandb_writes_status_into_the_run_table(monkeypatch):
    import wandb

    run, finished = FakeWandbRun(), []
    monkeypatch.setattr(wandb, "run", run)
    monkeypatch.setattr(wandb, "finish", lambda exit_code=0: finished.append(exit_code))
    finish_wandb({"status": "diverged", "diverged_at_step": 7, "best_val_loss": 2.5, "lr": 1.0})
    assert run.summary == {
        "status": "diverged",
        "diverged_at_step": 7,
        "best_val_loss": 2.5,
        "lr": 1.0,  # the peak: the logged metric's last value is the schedule's end
    }
    assert finished == [0]
