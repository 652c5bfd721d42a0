"""The data groups' configs (conf/data/*.yaml), torch-free: each key a field with its default,
read by node_to (runs/checks.py) before torch is imported; data/text.py and data/vision.py
check the values that need the data (sources, tokenizers) when they prepare it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TextDataConfig:
    source: str = "pydocs"  # pydocs | text_files | hf_text (data/corpora.py)
    paths: list[str] = field(default_factory=list)  # text_files
    hf_id: str | None = None  # hf_text
    hf_config: str | None = None
    hf_split: str = "train"
    hf_revision: str | None = None
    text_column: str = "text"
    val_fraction: float = 0.1
    val_batches: int = 8
    val_tokens: int | None = None  # fixed val windows covering this many targets (overrides)
    max_chars: int | None = None
    # train windows drawn from the first N train tokens only: a dataset-size study at a fixed
    # step count, with the vocabulary, the val windows and the unigram baseline of the whole
    # corpus (null: every train token)
    train_tokens: int | None = None
    encoding: str = "utf-8"  # text_files
    tokenizer: str = "char"  # char | bytes | bpe | <tokenizer.json> | <hub id> (data/tokenizer.py)
    vocab_size: int = 8192  # bpe
    bpe_train_chars: int | None = 100_000_000  # BPE learns from this many train chars at most
    cache_dir: str | None = None  # token files; null: $NORMLAB_CACHE or ~/.cache/normlab
    num_proc: int | None = None  # tokenizing processes; null: 1 below 64 MB, else the cores
    streaming: bool = False  # hf_text: stream the hub dataset up to max_tokens
    max_tokens: int | None = None  # streaming: tokens to keep (train + val)


@dataclass
class ImageDataConfig:
    source: str = "digits"  # digits | hf_image | image_folder (data/images.py)
    hf_id: str | None = None
    hf_config: str | None = None
    hf_revision: str | None = None
    path: str | None = None  # image_folder
    image_column: str = "image"
    label_column: str = "label"
    train_split: str = "train"
    val_split: str | None = "test"  # None: carve val_fraction off train; auto: test/validation
    val_fraction: float = 0.2
    image_size: int | None = None  # resize to image_size x image_size when set
    augment: list[str] = field(default_factory=list)  # crop, flip (train batches only)
    crop_padding: int = 4
    cache_dir: str | None = None  # decoded images; null: $NORMLAB_CACHE or ~/.cache/normlab
