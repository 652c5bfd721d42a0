"""Whether a plain JSON or YAML value fits a type annotation: what the summary schema
(runs/summary.py) and the config checker (training/config.py) both hold values to."""

from __future__ import annotations

import types
import typing
from typing import Any


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
