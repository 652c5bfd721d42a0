"""One spec per model kind: everything the harness needs to know about a model, in one place.

A kind (``model.name``) names the task that trains it (which names the model's module and
config class, so that ``Task.load_from_checkpoint`` can rebuild it), the data family it reads
(and the fields the prepared data decides), the results its summary.json holds, and how to draw
a random batch for it (the init probe's). Adding a model kind is a task subclass and one entry
in ``MODELS``; nothing else maps names or classes to kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as L
import torch
from omegaconf import DictConfig
from torch import nn

from data.text import TextDataConfig, TextDataModule
from data.vision import ImageDataConfig, ImageDataModule
from models.gpt import GPTConfig
from models.vit import ViTConfig
from training.errors import ConfigError
from training.task import ImageClassificationTask, LanguageModelTask, TrainTask

Batch = tuple[torch.Tensor, torch.Tensor]


def random_tokens(cfg: GPTConfig, batch_size: int, g: torch.Generator) -> Batch:
    """Uniform random tokens and their next-token targets, (B, T) each."""
    seq = torch.randint(0, cfg.vocab_size, (batch_size, cfg.block_size + 1), generator=g)
    return seq[:, :-1], seq[:, 1:]


def random_images(cfg: ViTConfig, batch_size: int, g: torch.Generator) -> Batch:
    """Gaussian images and uniform random labels."""
    shape = (batch_size, cfg.in_chans, cfg.image_size, cfg.image_size)
    labels = torch.randint(0, cfg.num_classes, (batch_size,), generator=g)
    return torch.randn(shape, generator=g), labels


@dataclass(frozen=True)
class ModelSpec:
    task: type[TrainTask]  # names its model and config classes (load_from_checkpoint needs them)
    data_kind: str  # the `kind` key of the data configs it accepts
    data_config: type
    datamodule: Callable[[Any], L.LightningDataModule]  # (the typed run config)
    data_fields: Callable[[Any], dict]  # model config fields read off the prepared datamodule
    summary_fields: tuple[str, ...]  # the results summary.json holds for this kind of model
    random_batch: Callable[[Any, int, torch.Generator], Batch]  # (config, size, generator)

    @property
    def config(self) -> type:
        return self.task.config_class

    @property
    def module(self) -> Callable[[Any], nn.Module]:
        return self.task.model_class


MODELS: dict[str, ModelSpec] = {
    "gpt": ModelSpec(
        LanguageModelTask,
        "text",
        TextDataConfig,
        lambda run: TextDataModule(run.data, run.model["block_size"], run.batch_size, run.seed),
        lambda dm: {"vocab_size": dm.vocab_size},
        ("final_val_bpb", "best_val_bpb", "tokens_per_s"),
        random_tokens,
    ),
    "vit": ModelSpec(
        ImageClassificationTask,
        "image",
        ImageDataConfig,
        lambda run: ImageDataModule(run.data, run.batch_size, run.seed),
        lambda dm: {
            "image_size": dm.image_size,
            "in_chans": dm.in_chans,
            "num_classes": dm.num_classes,
        },
        ("final_val_acc", "best_val_acc", "samples_per_s"),
        random_images,
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


def spec_of(config: Any) -> ModelSpec:
    """The spec of a model config (an instance of one of the kinds' config classes)."""
    for spec in MODELS.values():
        if type(config) is spec.config:
            return spec
    raise ValueError(f"no model kind has a {type(config).__name__}; kinds: {', '.join(MODELS)}")


def summary_fields(cfg: DictConfig) -> tuple[str, ...]:
    """The model kind's own summary fields (none for an unknown kind: the build refuses it)."""
    spec = MODELS.get(cfg.model.name) if isinstance(cfg.model.name, str) else None
    return spec.summary_fields if spec is not None else ()
