"""The MLP's elementwise activation, by name (config key model.activation): the ACTIVATIONS
registry. Its own module so the config can check a name without importing the layers."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,  # exact, erf-based (Hendrycks & Gimpel 2016)
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's tanh approximation, fused
    "relu": F.relu,  # the original Transformer's (Vaswani et al. 2017)
}


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation '{name}'; choose model.activation from: {', '.join(ACTIVATIONS)}"
        )
    return ACTIVATIONS[name]
