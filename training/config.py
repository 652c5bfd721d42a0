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
import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from training.errors import ConfigError
from training.task import OptimConfig


def closest(key: str, valid: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest valid key, or nothing."""
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def type_ok(value: Any, hint: Any) -> bool:
    """Whether ``value`` (a plain YAML value) fits the annotation ``hint``."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    args = typing.get_args(hint)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        inner = args[0] if args else Any
        return all(type_ok(v, inner) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(type_ok(v, args[1]) for v in value.values())
    return True  # anything else: the dataclass checks it


def type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def node_to(
    cls: type,
    node: Any,
    where: str,
    drop: Iterable[str] = (),
    renames: dict[str, str] | None = None,
    fields_of: type | None = None,
) -> Any:
    """The config node as ``cls(**kwargs)`` (``cls=dict``: the checked kwargs themselves, against
    the fields of ``fields_of``). Keys are renamed by ``renames``; ``drop`` keys are skipped."""
    schema = fields_of or cls
    renames = renames or {}
    for key in node:
        if OmegaConf.is_config(node) and OmegaConf.is_missing(node, key):
            raise ConfigError(f"{where}.{key} must be set: add {where}.{key}=... to the command")
    values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    hints = typing.get_type_hints(schema)
    valid = {f.name for f in dataclasses.fields(schema)}
    accepted = sorted(
        {k for k, f in renames.items() if f in valid} | (valid - set(renames.values()))
    )
    kwargs = {}
    for key, value in values.items():
        if key in drop:
            continue
        name = renames.get(key, key)
        if name not in valid:
            raise ConfigError(
                f"{where}.{key} is not a setting of {schema.__name__}{closest(key, accepted)}; "
                f"valid keys: {', '.join(accepted)}"
            )
        if not type_ok(value, hints[name]):
            raise ConfigError(
                f"{where}.{key}={value!r} must be of type {type_name(hints[name])}; "
                f"fix it on the command line ({where}.{key}=...)"
            )
        kwargs[name] = value
    return kwargs if cls is dict else cls(**kwargs)


# --- the root of the config ------------------------------------------------------------------
GROUPS = ("data", "model", "placement", "norm", "optim", "trainer", "logger")
SECTIONS = ("checkpoint", "probes", "divergence", "init_probe", "reproduce", "callbacks")
SCALARS: dict[str, Any] = {
    "seed": int,
    "name": str,
    "group": str | None,
    "study": str,
    "run_dir": str,
    "num_threads": int | None,
    "compile": bool | str | None,
    "resume": bool,
    "ckpt_path": str | None,
    "debug": bool,
}
TRAINER_INTS = ("max_steps", "log_every_n_steps", "accumulate_grad_batches", "num_sanity_val_steps")


def check_top_level(cfg: DictConfig) -> None:
    """Unknown root keys, and root scalars of the wrong type or range, in one line each."""
    valid = (*GROUPS, *SECTIONS, *SCALARS, "experiment", "hydra")
    for key in cfg:
        if key not in valid:
            raise ConfigError(
                f"unknown setting '{key}'{closest(key, valid)}; remove it, or use one of: "
                f"{', '.join(sorted(k for k in valid if k != 'hydra'))}"
            )
    for key, hint in SCALARS.items():
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        if key in cfg and not OmegaConf.is_missing(cfg, key) and not type_ok(value, hint):
            raise ConfigError(f"{key}={value!r} must be of type {type_name(hint)}")
    if cfg.seed < 0:
        raise ConfigError(f"seed must be >= 0, got {cfg.seed}")
    if cfg.num_threads is not None and cfg.num_threads < 1:
        raise ConfigError(f"num_threads must be >= 1 or null (every core), got {cfg.num_threads}")
    batch = cfg.data.get("batch_size")
    if not type_ok(batch, int) or not 1 <= batch <= 1_000_000:
        raise ConfigError(f"data.batch_size must be an integer in [1, 1000000], got {batch!r}")
    for key in TRAINER_INTS:
        value = cfg.trainer.get(key)
        if key in cfg.trainer and not type_ok(value, int | None):
            raise ConfigError(f"trainer.{key}={value!r} must be an integer")


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
    optim = node_to(OptimConfig, cfg.optim, "optim")
    return dataclasses.replace(optim, warmup_steps=warmup_steps)


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
