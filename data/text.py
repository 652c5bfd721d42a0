"""Character-level text data: corpus loading through HF datasets, vocabulary, step-indexed batches.

Sources (``TextDataConfig.source``):
  pydocs      English text of Python's own docs (``pydoc_data.topics``); ships with CPython.
  text_files  local UTF-8 text files, each file one document.
  hf_text     a Hugging Face hub dataset id plus its text column (needs the hub, or a warm cache).

The text is split before tokenization: the first ``1 - val_fraction`` of the characters is train,
the rest is val, contiguous, so no window straddles both. The vocabulary is the sorted set of train
chars plus one unknown id; val chars never seen in train map to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from data.hub import load_hub_dataset
from data.steps import StepBatches, StepDataModule, step_generator

SOURCES = ("pydocs", "text_files", "hf_text")
UNK = "\ufffd"  # shown for chars the train text never contained


@dataclass
class TextDataConfig:
    source: str = "pydocs"
    paths: list[str] = field(default_factory=list)
    hf_id: str | None = None
    hf_config: str | None = None
    hf_split: str = "train"
    text_column: str = "text"
    val_fraction: float = 0.1
    val_batches: int = 8
    max_chars: int | None = None
    encoding: str = "utf-8"  # for text_files


# ---------------------------------------------------------------- vocabulary


class CharVocab:
    """index -> char list with one unknown id; encode/decode are vectorized over code points."""

    def __init__(self, chars: list[str], unk_id: int):
        self.chars, self.unk_id = list(chars), unk_id
        codes = torch.tensor([ord(c) for c in self.chars], dtype=torch.long)
        self._table = torch.full((int(codes.max()) + 1,), unk_id, dtype=torch.long)
        self._table[codes] = torch.arange(len(codes))

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        chars = sorted(set(text))
        if UNK not in chars:
            chars.append(UNK)
        return cls(chars, chars.index(UNK))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        if not text:
            return torch.zeros(0, dtype=torch.long)
        codes = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32).long()
        known = codes < len(self._table)
        return torch.where(known, self._table[codes.clamp(max=len(self._table) - 1)], self.unk_id)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self.chars[i] for i in ids)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"chars": self.chars, "unk_id": self.unk_id}))


def load_vocab(path: str | Path) -> CharVocab:
    """Read a vocab.json written by ``TextDataModule.save_vocab`` (e.g. to decode a checkpoint)."""
    blob = json.loads(Path(path).read_text())
    return CharVocab(blob["chars"], blob["unk_id"])


# ---------------------------------------------------------------- corpora


def _pydocs_text() -> list[str]:
    import datasets

    try:
        from pydoc_data.topics import topics
    except ImportError as err:
        raise FileNotFoundError(
            "pydoc_data is missing from this Python; use data=text_files data.paths=[...]"
        ) from err
    ds = datasets.Dataset.from_dict({"text": [topics[k] for k in sorted(topics)]})
    return ds["text"]


def _file_texts(paths: list[str], encoding: str) -> list[str]:
    import datasets

    if not paths:
        raise ValueError("data.source=text_files needs files: set data.paths=[a.txt,b.txt]")
    for p in paths:
        if not Path(p).is_file():
            raise FileNotFoundError(f"text file not found: {p}; fix data.paths")
        if Path(p).stat().st_size == 0:
            raise ValueError(f"text file is empty: {p}; remove it from data.paths")
    files = [str(Path(p).resolve()) for p in paths]
    try:
        ds = datasets.load_dataset(
            "text", data_files=files, sample_by="document", encoding=encoding, split="train"
        )
    except Exception as err:
        if isinstance(err.__cause__, UnicodeDecodeError) or isinstance(err, UnicodeDecodeError):
            raise ValueError(
                f"cannot decode data.paths as {encoding}; convert the files to UTF-8 "
                "or set data.encoding"
            ) from err
        raise
    return ds["text"]


def _hub_texts(cfg: TextDataConfig) -> list[str]:
    if not cfg.hf_id:
        raise ValueError("data.source=hf_text needs data.hf_id=<hub dataset id>")
    fallback = "use data=text_files data.paths=[...] with local files"
    ds = load_hub_dataset(cfg.hf_id, cfg.hf_config, cfg.hf_split, fallback)
    if cfg.text_column not in ds.column_names:
        raise ValueError(
            f"{cfg.hf_id} has no column {cfg.text_column!r}; set data.text_column to one of "
            f"{ds.column_names}"
        )
    texts, total = [], 0
    for row in ds.select_columns([cfg.text_column]):
        texts.append(row[cfg.text_column])
        total += len(texts[-1]) + 1
        if cfg.max_chars is not None and total >= cfg.max_chars:
            break  # large corpora: stop reading once max_chars is covered
    return texts


def load_text(cfg: TextDataConfig) -> str:
    """The whole corpus as one string, documents joined by newlines, cut to ``max_chars``."""
    if cfg.source == "pydocs":
        docs = _pydocs_text()
    elif cfg.source == "text_files":
        docs = _file_texts(list(cfg.paths), cfg.encoding)
    elif cfg.source == "hf_text":
        docs = _hub_texts(cfg)
    else:
        raise ValueError(f"unknown data.source {cfg.source!r}; choose one of {list(SOURCES)}")
    text = "\n".join(docs)
    return text[: cfg.max_chars] if cfg.max_chars is not None else text


# ---------------------------------------------------------------- datamodule


class TextDataModule(StepDataModule):
    """Next-character prediction windows over one in-memory token tensor."""

    def __init__(self, cfg: TextDataConfig, block_size: int, batch_size: int, seed: int):
        super().__init__()
        if cfg.source not in SOURCES:
            raise ValueError(f"unknown data.source {cfg.source!r}; choose one of {list(SOURCES)}")
        if not 0.0 < cfg.val_fraction < 1.0:
            raise ValueError(f"data.val_fraction={cfg.val_fraction} must lie in (0, 1)")
        if cfg.val_batches < 1 or batch_size < 1 or block_size < 1:
            raise ValueError("data.val_batches, data.batch_size and model.block_size must be >= 1")
        self.cfg, self.block_size, self.batch_size, self.seed = cfg, block_size, batch_size, seed
        self.start_step = 0
        self.char_vocab: CharVocab | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.char_vocab is not None:
            return
        text = load_text(self.cfg)
        n_val = int(len(text) * self.cfg.val_fraction)
        train_text, val_text = text[: len(text) - n_val], text[len(text) - n_val :]
        need = self.block_size + 1
        for name, part in (("train", train_text), ("val", val_text)):
            if len(part) < need:
                raise ValueError(
                    f"{name} split has {len(part)} chars but block_size+1={need} are needed; "
                    "lower model.block_size, adjust data.val_fraction, or use more text"
                )
        self.char_vocab = CharVocab.from_text(train_text)
        self.train_tokens = self.char_vocab.encode(train_text)
        self.val_tokens = self.char_vocab.encode(val_text)

    @property
    def vocab(self) -> list[str]:
        return self._ready().chars

    @property
    def vocab_size(self) -> int:
        return len(self._ready())

    def encode(self, text: str) -> torch.Tensor:
        return self._ready().encode(text)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return self._ready().decode(ids)

    def save_vocab(self, path: str | Path) -> None:
        self._ready().save(path)

    def _ready(self) -> CharVocab:
        if self.char_vocab is None:
            raise RuntimeError("call dm.setup() before using the vocabulary or the loaders")
        return self.char_vocab

    def windows(self, tokens: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(x, y) for windows starting at ``offsets``: one gather, y is x shifted by one."""
        idx = offsets[:, None] + torch.arange(self.block_size + 1)  # (B, T+1)
        chunk = tokens[idx]
        return chunk[:, :-1], chunk[:, 1:]

    def train_batch(
        self, step: int, batch_size: int | None = None, rows: slice | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Rows ``rows`` of optimizer step ``step``'s train batch: depend on (seed, step) only."""
        self._ready()
        high = len(self.train_tokens) - self.block_size  # last start leaving T+1 tokens
        b = batch_size or self.batch_size
        offsets = torch.randint(0, high, (b,), generator=step_generator(self.seed, step))
        return self.windows(self.train_tokens, offsets[rows or slice(None)])

    def train_dataloader(self) -> DataLoader:
        self._ready()
        return DataLoader(
            StepBatches(self.train_batch, self.batch_size, self.start_step), batch_size=None
        )

    def val_dataloader(self) -> DataLoader:
        """``val_batches`` batches of evenly spaced windows over the val split, same every call."""
        self._ready()
        n = self.cfg.val_batches * self.batch_size
        last = len(self.val_tokens) - self.block_size - 1
        offsets = torch.linspace(0, last, n).round().long()
        x, y = self.windows(self.val_tokens, offsets)
        batches = list(zip(x.split(self.batch_size), y.split(self.batch_size), strict=True))
        return DataLoader(batches, batch_size=None)
