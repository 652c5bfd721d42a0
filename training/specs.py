"""One spec per model kind: everything the harness needs to know about a model, in one place.

A kind (``model.name``) names the task that trains it (which names the model's module and
config class, so that ``Task.load_from_checkpoint`` can rebuild it), the data family it reads
(and the fields the prepared data decides), the results its summary.json holds, and how to draw
a random batch for it (the init probe's). Adding a model kind is a task subclass and one entry
in ``MODELS``; nothing else maps names or classes to kinds. Torch-free: the task, its model and
the datamodule load when a run builds them, so a config is checked before torch is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from data.config import ImageDataConfig, TextDataConfig
from models.config import GPTConfig, ViTConfig

if TYPE_CHECKING:
    import torch

    Batch = tuple[torch.Tensor, torch.Tensor]


def random_tokens(cfg: GPTConfig, batch_size: int, g: torch.Generator) -> Batch:
    """Uniform random tokens and their next-token targets, (B, T) each."""
    import torch

    seq = torch.randint(0, cfg.vocab_size, (batch_size, cfg.block_size + 1), generator=g)
    return seq[:, :-1], seq[:, 1:]


def random_images(cfg: ViTConfig, batch_size: int, g: torch.Generator) -> Batch:
    """Gaussian images and uniform random labels."""
    import torch

    shape = (batch_size, cfg.in_chans, cfg.image_size, cfg.image_size)
    labels = torch.randint(0, cfg.num_classes, (batch_size,), generator=g)
    return torch.randn(shape, generator=g), labels


def text_datamodule(run: Any) -> Any:
    from data.text import TextDataModule

    return TextDataModule(run.data, run.model.block_size, run.batch_size, run.seed)


def image_datamodule(run: Any) -> Any:
    from data.vision import ImageDataModule

    return ImageDataModule(run.data, run.batch_size, run.seed)


@dataclass(frozen=True)
class ModelSpec:
    config: type  # the model's config class (models/config.py)
    task_name: str  # its TrainTask in training/task.py, which names its model class too
    data_kind: str  # the `kind` key of the data configs it accepts
    data_config: type
    datamodule: Callable[[Any], Any]  # (the typed run config) -> a LightningDataModule
    data_fields: Callable[[Any], dict]  # model config fields read off the prepared datamodule
    # those fields at values the config's own checks accept, from the model node's other
    # fields: the config is checked whole before the data is prepared (run_config.py)
    data_placeholders: Callable[[dict], dict]
    summary_fields: tuple[str, ...]  # the results summary.json holds for this kind of model
    random_batch: Callable[[Any, int, Any], Batch]  # (config, size, torch generator)

    @property
    def task(self) -> type:
        """The TrainTask (load_from_checkpoint needs its model and config classes)."""
        return getattr(importlib.import_module("training.task"), self.task_name)

    @property
    def module(self) -> Callable[[Any], Any]:
        return self.task.model_class


MODELS: dict[str, ModelSpec] = {
    "gpt": ModelSpec(
        GPTConfig,
        "LanguageModelTask",
        "text",
        TextDataConfig,
        text_datamodule,
        lambda dm: {"vocab_size": dm.vocab_size},
        lambda model: {"vocab_size": 2},
        ("final_val_bpb", "best_val_bpb", "tokens_per_s"),
        random_tokens,
    ),
    "vit": ModelSpec(
        ViTConfig,
        "ImageClassificationTask",
        "image",
        ImageDataConfig,
        image_datamodule,
        lambda dm: {
            "image_size": dm.image_size,
            "in_chans": dm.in_chans,
            "num_classes": dm.num_classes,
        },
        lambda model: {
            "image_size": model.get("patch_size", ViTConfig.patch_size),  # one patch
            "in_chans": 1,
            "num_classes": 2,
        },
        ("final_val_acc", "best_val_acc", "samples_per_s"),
        random_images,
    ),
}


def spec_of(config: Any) -> ModelSpec:
    """The spec of a model config (an instance of one of the kinds' config classes)."""
    for spec in MODELS.values():
        if type(config) is spec.config:
            return spec
    raise ValueError(f"no model kind has a {type(config).__name__}; kinds: {', '.join(MODELS)}")
