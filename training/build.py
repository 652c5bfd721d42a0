"""Turn a composed config into the parts of a run: data, model, task, callbacks, trainer, summary.

Config nodes hold primitives only; names become classes here, through the MODELS registry and
typed dataclasses, so an unknown key or name fails before any training with one clear line.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import Callback, RichProgressBar
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf
from torch import nn

from data.text import TextDataConfig, TextDataModule
from data.vision import ImageDataConfig, ImageDataModule
from models.gpt import GPT, GPTConfig
from models.vit import ViT, ViTConfig
from training.divergence import DivergenceConfig
from training.loggers import WandbMetrics
from training.ngpt import SphereWeights
from training.probes import ProbeConfig
from training.probes import build_callbacks as probe_callbacks
from training.resume import AtomicCheckpointIO, PeriodicCheckpoint, default_every_n_steps
from training.task import ImageClassificationTask, LanguageModelTask, OptimConfig, TrainTask

# The run dir already holds .hydra/ and vocab.json when the logger and checkpoint first look.
warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
# The task logs val metrics already reduced across ranks (exact sums, then the ratio).
warnings.filterwarnings("ignore", message=r".*when logging on epoch level in distributed")
# A deprecation inside lightning's own use of torch's pytree; nothing a user can act on.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


class ConfigError(ValueError):
    """A config that cannot run; the message names the fix."""


def from_node(cls: type, node: Any, where: str, renames: dict[str, str] | None = None):
    """The node as keyword args for ``cls`` (keys renamed); a missing or unknown key fails by its
    config path, listing the valid keys."""
    renames = renames or {}
    for key in node:
        if OmegaConf.is_missing(node, key):
            raise ConfigError(f"{where}.{key} must be set: add {where}.{key}=... to the command")
    values = OmegaConf.to_container(node, resolve=True)
    valid = {f.name for f in fields(cls)}
    back = {field: key for key, field in renames.items()}
    accepted = sorted(back.get(f, f) for f in valid)
    for key in values:
        if renames.get(key, key) not in valid:
            raise ConfigError(
                f"{where}.{key} is not a setting of {cls.__name__}; "
                f"valid keys: {', '.join(accepted)}"
            )
    return {renames.get(k, k): v for k, v in values.items()}


# --- what each model needs: its config and module, its task, and the data family it reads ----
@dataclass(frozen=True)
class ModelSpec:
    config: type
    module: Callable[[Any], nn.Module]
    task: type[TrainTask]
    data_kind: str  # the `kind` key of the data configs it accepts
    data_config: type
    datamodule: Callable[[Any, DictConfig], L.LightningDataModule]  # (data config, run config)
    data_fields: Callable[[Any], dict]  # model config fields read off the prepared datamodule


MODELS: dict[str, ModelSpec] = {
    "gpt": ModelSpec(
        GPTConfig,
        GPT,
        LanguageModelTask,
        "text",
        TextDataConfig,
        lambda d, cfg: TextDataModule(d, cfg.model.block_size, cfg.data.batch_size, cfg.seed),
        lambda dm: {"vocab_size": dm.vocab_size},
    ),
    "vit": ModelSpec(
        ViTConfig,
        ViT,
        ImageClassificationTask,
        "image",
        ImageDataConfig,
        lambda d, cfg: ImageDataModule(d, cfg.data.batch_size, cfg.seed),
        lambda dm: {
            "image_size": dm.image_size,
            "in_chans": dm.in_chans,
            "num_classes": dm.num_classes,
        },
    ),
}


def model_spec(cfg: DictConfig) -> ModelSpec:
    name = cfg.model.name
    if name not in MODELS:
        raise ConfigError(f"unknown model.name '{name}'; choose one of: {', '.join(MODELS)}")
    spec = MODELS[name]
    if cfg.data.kind != spec.data_kind:
        raise ConfigError(
            f"model={name} trains on {spec.data_kind} data but the data config holds "
            f"{cfg.data.kind} data; pick a data=... option of kind {spec.data_kind}"
        )
    return spec


def build_data(cfg: DictConfig, spec: ModelSpec) -> L.LightningDataModule:
    """The datamodule, set up now: the model's vocabulary or image shape depends on it."""
    node = OmegaConf.masked_copy(cfg.data, [k for k in cfg.data if k not in ("kind", "batch_size")])
    data_cfg = spec.data_config(**from_node(spec.data_config, node, "data"))
    dm = spec.datamodule(data_cfg, cfg)
    dm.setup("fit")
    return dm


# Group keys that carry a prefix in the model config; other keys keep their names.
PLACEMENT_KEYS = {"name": "placement", "alpha": "deepnorm_alpha", "beta": "deepnorm_beta"}
NORM_KEYS = {"name": "norm", "eps": "norm_eps", "alpha": "dyt_alpha", "groups": "norm_groups"}


def model_config(cfg: DictConfig, spec: ModelSpec, dm: L.LightningDataModule) -> Any:
    """Model config = model node + placement node + norm node + the fields the data decides."""
    model_node = OmegaConf.masked_copy(cfg.model, [k for k in cfg.model if k != "name"])
    kwargs = {
        **from_node(spec.config, model_node, "model"),
        **from_node(spec.config, cfg.placement, "placement", PLACEMENT_KEYS),
        **from_node(spec.config, cfg.norm, "norm", NORM_KEYS),
        **spec.data_fields(dm),
    }
    return spec.config(**kwargs)


def build_model(cfg: DictConfig, spec: ModelSpec, dm: L.LightningDataModule) -> nn.Module:
    return spec.module(model_config(cfg, spec, dm))


def build_optim(cfg: DictConfig) -> OptimConfig:
    return OptimConfig(**from_node(OptimConfig, cfg.optim, "optim"))


def check_run_length(cfg: DictConfig) -> None:
    """Values Lightning would accept silently (max_steps=-1 runs forever, 0 trains nothing)."""
    steps, warmup = cfg.trainer.max_steps, cfg.optim.warmup_steps
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"trainer.max_steps must be a positive integer, got {steps!r}")
    if isinstance(warmup, int) and warmup > steps:
        raise ConfigError(
            f"optim.warmup_steps={warmup} is longer than the run (trainer.max_steps={steps}); "
            f"lower optim.warmup_steps (e.g. optim.warmup_steps={max(1, steps // 10)}) "
            "or raise trainer.max_steps"
        )
    node = cfg.get("checkpoint") or {}
    every, seconds = node.get("every_n_steps"), node.get("every_s")
    if every is not None and (not isinstance(every, int) or every < 1):
        raise ConfigError(f"checkpoint.every_n_steps must be >= 1 or null, got {every!r}")
    if seconds is not None and seconds <= 0:
        raise ConfigError(f"checkpoint.every_s must be > 0 or null, got {seconds!r}")


def build_probe_configs(cfg: DictConfig) -> tuple[ProbeConfig, DivergenceConfig]:
    probes = from_node(ProbeConfig, cfg.get("probes") or {}, "probes")
    divergence = from_node(DivergenceConfig, cfg.get("divergence") or {}, "divergence")
    return ProbeConfig(**probes), DivergenceConfig(**divergence)


# --- callbacks and trainer -------------------------------------------------------------------
class StepProgressBar(RichProgressBar):
    """Rich progress over optimizer steps; the endless train loader makes epochs meaningless."""

    def _get_train_description(self, current_epoch: int) -> str:
        return "train steps"


def build_callbacks(
    cfg: DictConfig, run_dir: Path, probes: ProbeConfig, divergence: DivergenceConfig
) -> list[Callback]:
    """Progress bar, wandb metric definitions, the stability probes, divergence detection
    (after the probes: it may clear a non-finite gradient they read) and periodic last.ckpt."""
    callbacks: list[Callback] = [SphereWeights()]  # nGPT's, first: before probes and checkpoints
    if cfg.trainer.get("enable_progress_bar", True):
        callbacks.append(StepProgressBar(leave=True))
    callbacks.append(WandbMetrics())
    callbacks += probe_callbacks(probes, divergence)
    if cfg.trainer.get("enable_checkpointing", True):
        node = cfg.get("checkpoint") or {}
        every = node.get("every_n_steps") or default_every_n_steps(cfg.trainer.max_steps)
        callbacks.append(PeriodicCheckpoint(run_dir / "last.ckpt", every, node.get("every_s")))
    return callbacks


def build_trainer(
    cfg: DictConfig, run_dir: Path, loggers: list[Logger], callbacks: list[Callback]
) -> L.Trainer:
    kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    try:
        return L.Trainer(
            default_root_dir=run_dir,
            logger=loggers or False,
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO()],
            **kwargs,
        )
    except TypeError as err:
        raise ConfigError(f"trainer: {err}; keys under trainer are lightning.Trainer args") from err


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_mode(value: object) -> str | None:
    """The torch.compile mode `compile` asks for: null/false is eager, true is "default"."""
    if value is None or value is False:
        return None
    if value is True:
        return "default"
    if value not in COMPILE_MODES:
        raise ValueError(
            f"compile={value!r} is not a torch.compile mode; use true, false or one of: "
            + ", ".join(COMPILE_MODES)
        )
    return str(value)


def allow_tf32(accelerator: str) -> None:
    """TF32 for the fp32 matmuls and convolutions left outside autocast, on GPUs only."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def set_threads(num_threads: int | None) -> int:
    """All cores this process may use unless configured (torch defaults to physical cores)."""
    n = num_threads
    if not n:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = n or 1
    torch.set_num_threads(n)
    return n


# --- summary ----------------------------------------------------------------------------------
def base_summary(cfg: DictConfig, run_dir: Path) -> dict:
    """The fields summary.json holds whatever happens to the run."""
    summary = {
        "status": "failed",
        "mode": cfg.get("mode", "train"),
        "name": cfg.name,
        "model": cfg.model.name,
        "placement": cfg.placement.name,
        "norm": cfg.norm.name,
        "n_layer": cfg.model.n_layer,
        "n_embd": cfg.model.n_embd,
        "lr": cfg.optim.lr,
        "warmup_steps": cfg.optim.warmup_steps,
        "seed": cfg.seed,
        "steps": 0,
        "diverged_at_step": None,
        "final_train_loss": None,
        "final_val_loss": None,
        "best_val_loss": None,
        "wall_s": None,
        "run_dir": str(run_dir),
        "params": None,
        "resumed_from_step": None,
    }
    if cfg.model.name == "vit":
        summary.update(final_val_acc=None, best_val_acc=None, samples_per_s=None)
    else:
        summary["tokens_per_s"] = None
    return summary


def write_summary(path: Path, summary: dict) -> None:
    """Written whole or not at all: a kill mid-write leaves the previous file."""

    def clean(v: Any) -> Any:  # JSON has no NaN/inf: write null
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return None if isinstance(v, float) and not math.isfinite(v) else v

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(clean(summary), indent=2) + "\n")
    os.replace(tmp, path)


def result_line(summary: dict) -> str:
    def fmt(v: Any) -> str:
        return "n/a" if v is None else f"{v:.4f}"

    acc = f" val_acc={fmt(summary['final_val_acc'])}" if "final_val_acc" in summary else ""
    return (
        f"val_loss={fmt(summary['final_val_loss'])}{acc} status={summary['status']} "
        f"dir={summary['run_dir']}"
    )
