"""Data modules: character-level text and small image classification sets."""

from data.text import CharVocab, TextDataConfig, TextDataModule, load_vocab
from data.vision import ImageDataConfig, ImageDataModule

__all__ = [
    "CharVocab",
    "ImageDataConfig",
    "ImageDataModule",
    "TextDataConfig",
    "TextDataModule",
    "load_vocab",
]
