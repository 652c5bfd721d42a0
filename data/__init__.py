"""Data: step-indexed batches (steps), hub access (hub), text corpora (text), images (vision)."""

from data.steps import StepBatches, StepDataModule, step_generator
from data.text import CharVocab, TextDataConfig, TextDataModule, load_vocab
from data.vision import ImageDataConfig, ImageDataModule

__all__ = [
    "CharVocab",
    "ImageDataConfig",
    "ImageDataModule",
    "StepBatches",
    "StepDataModule",
    "TextDataConfig",
    "TextDataModule",
    "load_vocab",
    "step_generator",
]
