"""The MLP's elementwise activation, by name (config key model.activation): the ACTIVATIONS
registry (models/catalog.py, torch-free, so the config checks a name before torch loads)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from models.catalog import ACTIVATIONS, check_activation


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    check_activation(name)
    function, kwargs = ACTIVATIONS[name]
    return partial(getattr(F, function), **kwargs) if kwargs else getattr(F, function)
