"""The one checker of settings and records: whether a plain JSON or YAML value fits a type
annotation (what the summary schema, runs/summary.py, holds records to), and ``node_to``, which
reads a config node into its dataclass.

The typed config dataclasses (GPTConfig, OptimConfig, TextDataConfig, ProbeConfig, ...) are the
schema: ``node_to`` refuses unknown keys (naming the closest valid one) and values of the wrong
type by the field's annotation, before the dataclass checks ranges. Hydra's structured configs
could check types too, but their errors surface inside Hydra's multi-line report before any of
our code runs; checking here keeps every message to one line that names the key and the fix.
Torch-free: a bad key answers before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterable
from typing import Any

from omegaconf import OmegaConf

from runs.errors import ConfigError


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


def closest(key: str, valid: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest valid key, or nothing."""
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""
