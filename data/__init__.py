"""Data: step-indexed batches (steps), hub access (hub), text corpora (text), images (vision);
the groups' configs (config, torch-free). The names below load their module on first use, so
importing data.config (the config check) stays free of torch."""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
EXPORTS = {
    "CharVocab": "text",
    "ImageDataConfig": "config",
    "ImageDataModule": "vision",
    "StepBatches": "steps",
    "StepDataModule": "steps",
    "TextDataConfig": "config",
    "TextDataModule": "text",
    "load_vocab": "tokenizer",
    "step_generator": "steps",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module 'data' has no attribute {name!r}")
    return getattr(importlib.import_module(f"data.{EXPORTS[name]}"), name)
