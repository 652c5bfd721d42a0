"""Checking the composed config: every key known, every value of its field's type and range.

The typed config dataclasses (GPTConfig, OptimConfig, TextDataConfig, ProbeConfig, ...) are the
schema: ``node_to`` reads a config node into one of them, refusing unknown keys (naming the
closest valid one) and values of the wrong type by the field's annotation, before the dataclass
checks ranges. ``check_top_level`` does the same for the root keys, which Hydra would otherwise
accept silently (``+placment=post`` adds a key nobody reads). Hydra's structured configs could
check types too, but their errors surface inside Hydra's multi-line report before any of our
code runs; checking here keeps every message to one line that names the key and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runs.errors import ConfigError
from runs.schema import ROOT, keys_of
from runs.types import type_name, type_ok
from training.errors import closest
from training.optim_config import OPTIMIZER_KEYS, SCHEDULE_KEYS, OptimConfig


def all_finite(value: Any) -> bool:
    """No nan or inf anywhere in ``value``: as a setting either turns a comparison off (a
    divergence factor of nan never fires) or poisons every sum it enters."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(all_finite(v) for v in value)
    if isinstance(value, dict):
        return all(all_finite(v) for v in value.values())
    return True


def setting_ok(value: Any, hint: Any) -> bool:
    """A config value fits its field: of the annotated type and finite."""
    return type_ok(value, hint) and all_finite(value)


def type_error(key: str, value: Any, hint: Any) -> str:
    """The one line for ``key=value`` not fitting ``hint`` (a non-finite float named as such)."""
    fix = f"fix it on the command line ({key}=...)"
    if not all_finite(value):
        return f"{key} must be a finite number, got {value!r}; {fix}"
    return f"{key}={value!r} must be of type {type_name(hint)}; {fix}"


def node_to(
    cls: type,
    node: Any,
    where: str,
    drop: Iterable[str] = (),
    fields_of: type | None = None,
    owned: dict[str, str] | None = None,
) -> Any:
    """The config node as ``cls(**kwargs)`` (``cls=dict``: the checked kwargs themselves, against
    the fields of ``fields_of``). ``drop`` keys are skipped;
    ``owned`` keys are fields another group sets (key -> where it lives): refused, naming it."""
    schema = fields_of or cls
    owned = owned or {}
    for key in node:
        if OmegaConf.is_config(node) and OmegaConf.is_missing(node, key):
            raise ConfigError(f"{where}.{key} must be set: add {where}.{key}=... to the command")
    values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    hints = typing.get_type_hints(schema)
    valid = {f.name for f in dataclasses.fields(schema)}
    accepted = sorted(valid - set(owned))
    kwargs = {}
    for key, value in values.items():
        if key in drop:
            continue
        if key in owned:
            fix = owned[key].format(value=value)
            raise ConfigError(f"{where}.{key} is not read from {where}: set it as {fix}")
        if key not in valid:
            raise ConfigError(
                f"{where}.{key} is not a setting of {schema.__name__}{closest(key, accepted)}; "
                f"valid keys: {', '.join(accepted)}"
            )
        if not setting_ok(value, hints[key]):
            raise ConfigError(type_error(f"{where}.{key}", value, hints[key]))
        kwargs[key] = value
    return kwargs if cls is dict else cls(**kwargs)


# --- the root of the config ------------------------------------------------------------------
GROUPS, SECTIONS = keys_of("group"), keys_of("section")  # runs/schema.py: ROOT
SCALARS: dict[str, Any] = {k: ROOT[k].type for k in keys_of("scalar")}
TRAINER_INTS = ("max_steps", "log_every_n_steps", "accumulate_grad_batches", "num_sanity_val_steps")
SEED_MAX = 2**32 - 1
# Lightning precisions normlab runs (its probes and kernels are fp32 / bf16 / fp16 code).
PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true")


def check_top_level(cfg: DictConfig) -> None:
    """Unknown root keys, and root scalars of the wrong type or range, in one line each."""
    valid = tuple(ROOT)
    for key in cfg:
        if key not in valid:
            raise ConfigError(
                f"unknown setting '{key}'{closest(key, valid)}; remove it, or use one of: "
                f"{', '.join(sorted(k for k in valid if k != 'hydra'))}"
            )
    for key, hint in SCALARS.items():
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        if key in cfg and not OmegaConf.is_missing(cfg, key) and not setting_ok(value, hint):
            raise ConfigError(type_error(key, value, hint))
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ConfigError(f"seed must be in [0, {SEED_MAX}] (numpy's range), got {cfg.seed}")
    cores = os.cpu_count() or 1
    if cfg.num_threads is not None and not 1 <= cfg.num_threads <= cores:
        raise ConfigError(
            f"num_threads must be in [1, {cores}] (this machine's cores) or null (the free "
            f"cores), got {cfg.num_threads}; more threads than cores only slow a run down"
        )
    batch = cfg.data.get("batch_size")
    if not type_ok(batch, int) or not 1 <= batch <= 1_000_000:
        raise ConfigError(f"data.batch_size must be an integer in [1, 1000000], got {batch!r}")
    for key in TRAINER_INTS:
        value = cfg.trainer.get(key)
        if key in cfg.trainer and not type_ok(value, int | None):
            raise ConfigError(f"trainer.{key}={value!r} must be an integer")
    check_trainer_values(cfg)


# The train loader never ends an epoch, so validation is due every N optimizer steps (an int):
# Lightning's epoch fractions (0.5) and null (once an epoch) have no epoch to refer to.
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


def check_trainer_values(cfg: DictConfig) -> None:
    """Trainer values Lightning accepts but that would crash later, or run other than recorded."""
    if "val_check_interval" in cfg.trainer:
        every = cfg.trainer.get("val_check_interval")
        if not type_ok(every, int) or every < 1:
            raise ConfigError(
                f"trainer.val_check_interval={every!r} must be a whole number of steps >= 1 "
                "(the data never ends an epoch); e.g. trainer.val_check_interval=100, or "
                "+trainer.limit_val_batches=0 for no validation"
            )
    for key in ("accumulate_grad_batches", "log_every_n_steps"):
        value = cfg.trainer.get(key)
        if value is not None and value < 1:
            raise ConfigError(f"trainer.{key}={value!r} must be >= 1")
    devices = cfg.trainer.get("devices", 1)
    if not (devices == "auto" or (type_ok(devices, int) and (devices >= 1 or devices == -1))):
        raise ConfigError(
            f"trainer.devices={devices!r} must be >= 1, -1 (every GPU) or auto; e.g. "
            "trainer.devices=1"
        )
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator not in ACCELERATORS:
        raise ConfigError(
            f"trainer.accelerator={accelerator} is not one normlab runs on; use one of: "
            + ", ".join(ACCELERATORS)
        )
    clip = cfg.trainer.get("gradient_clip_val")
    if clip is not None and not (type_ok(clip, float) and math.isfinite(clip) and clip >= 0):
        raise ConfigError(
            f"trainer.gradient_clip_val={clip!r} must be a finite number >= 0, or null (off)"
        )
    precision = str(cfg.trainer.get("precision", "32-true"))
    if precision not in PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision} is not one normlab runs; use one of: "
            + ", ".join(PRECISIONS)
        )
    if accelerator in ("gpu", "cuda") and not gpu_accelerator("auto"):
        raise ConfigError(
            "trainer=gpu needs a CUDA GPU and torch sees none here; use trainer=cpu (or "
            "trainer.accelerator=cpu)"
        )
    if precision.startswith("16") and not gpu_accelerator(accelerator):
        raise ConfigError(
            f"trainer.precision={precision} needs a GPU (on the CPU Lightning trains bf16 "
            "instead); use trainer.precision=bf16-mixed"
        )


def gpu_accelerator(accelerator: str) -> bool:
    """Whether Lightning's ``accelerator`` puts the run on a GPU (auto: when torch sees one)."""
    if accelerator in ("gpu", "cuda"):
        return True
    import torch

    return accelerator == "auto" and torch.cuda.is_available()


def check_run_length(cfg: DictConfig) -> int:
    """Values Lightning would accept silently (max_steps=-1 runs forever, 0 trains nothing);
    returns the warmup to use: one longer than the run is clamped with a warning, or refused
    with ``optim.strict_warmup=true`` (stability experiments, where warmup is the variable)."""
    steps, warmup = cfg.trainer.max_steps, cfg.optim.warmup_steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"trainer.max_steps must be a positive integer, got {steps!r}")
    if not type_ok(warmup, int) or warmup < 0:
        raise ConfigError(f"optim.warmup_steps must be an integer >= 0, got {warmup!r}")
    if warmup > steps:
        if cfg.optim.get("strict_warmup", False):
            raise ConfigError(
                f"optim.warmup_steps={warmup} is longer than the run (trainer.max_steps={steps}); "
                f"lower optim.warmup_steps (e.g. optim.warmup_steps={max(1, steps // 10)}) "
                "or raise trainer.max_steps"
            )
        clamped = max(1, steps // 10)
        print(
            f"warning: optim.warmup_steps={warmup} is longer than the run "
            f"(trainer.max_steps={steps}); warming up over {clamped} steps instead",
            flush=True,
        )
        warmup = clamped
    node = cfg.get("checkpoint") or {}
    every, seconds = node.get("every_n_steps"), node.get("every_s")
    if every is not None and (not type_ok(every, int) or every < 1):
        raise ConfigError(f"checkpoint.every_n_steps must be >= 1 or null, got {every!r}")
    if seconds is not None and (not type_ok(seconds, float) or seconds <= 0):
        raise ConfigError(f"checkpoint.every_s must be > 0 or null, got {seconds!r}")
    return warmup


def optim_config(cfg: DictConfig, warmup_steps: int) -> OptimConfig:
    """optim's node as its dataclass; a key the chosen optimizer does not read is refused."""
    name = cfg.optim.get("name")
    if name in OPTIMIZER_KEYS:
        reads = (*SCHEDULE_KEYS, *OPTIMIZER_KEYS[name])
        unread = [k for k in cfg.optim if k not in reads and k in OPTIMIZER_FIELDS]
        if unread:
            users = [n for n, keys in OPTIMIZER_KEYS.items() if unread[0] in keys]
            raise ConfigError(
                f"optim.{unread[0]} is not read by optim={name} (it reads "
                f"{', '.join(OPTIMIZER_KEYS[name]) or 'only the schedule keys'} besides the "
                f"schedule keys); drop it{', or use optim=' + '/'.join(users) if users else ''}"
            )
    optim = node_to(OptimConfig, cfg.optim, "optim")
    return dataclasses.replace(optim, warmup_steps=warmup_steps)


OPTIMIZER_FIELDS = {f.name for f in dataclasses.fields(OptimConfig)}

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_mode(value: object) -> str | None:
    """The torch.compile mode `compile` asks for: null/false is eager, true is "default"."""
    if value is None or value is False:
        return None
    if value is True:
        return "default"
    if value not in COMPILE_MODES:
        raise ConfigError(
            f"compile={value!r} is not a torch.compile mode; use true, false or one of: "
            + ", ".join(COMPILE_MODES)
        )
    return str(value)
