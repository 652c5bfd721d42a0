"""Language-model windows read from memory-mapped token files (prepared by data/tokens.py).

The train batch of step s is ``batch_size`` random windows of ``block_size + 1`` tokens, their
starts drawn from ``step_generator(seed, s)``: x is a window's first T tokens, y its last T. Each
DDP rank gathers only its own rows of that global batch. Validation reads a fixed set of windows
evenly spaced over the val split: ``val_batches`` batches, or enough to cover ``val_tokens``
targets when that is set. Only the windows of a batch are ever in memory, never the corpus.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from data import corpora
from data.config import TextDataConfig
from data.steps import StepBatches, StepDataModule, step_generator
from data.tokenizer import (
    NAMES,
    CharVocab,
    Tokenizer,
    check_vocab_size,
)
from data.tokens import prepare_text


def check_text_config(cfg: TextDataConfig) -> None:
    """Bad values fail before anything is read, each with the fix."""
    corpora.check_source(cfg)
    if not 0.0 < cfg.val_fraction < 1.0:
        raise ValueError(f"data.val_fraction={cfg.val_fraction} must lie in (0, 1)")
    if not cfg.tokenizer:
        raise ValueError(f"data.tokenizer is empty; choose one of {list(NAMES)}")
    check_vocab_size(cfg.tokenizer, cfg.vocab_size)
    if cfg.val_tokens is not None and cfg.val_tokens < 1:
        raise ValueError(f"data.val_tokens={cfg.val_tokens} must be >= 1 or null")
    if cfg.train_tokens is not None and (not isinstance(cfg.train_tokens, int) or
                                         cfg.train_tokens < 2):  # fmt: skip
        raise ValueError(f"data.train_tokens={cfg.train_tokens!r} must be an integer >= 2 or null")
    if cfg.streaming:
        if cfg.tokenizer == "char":
            raise ValueError(
                "data.streaming=true cannot build a char vocabulary before reading the whole "
                "stream; use data.tokenizer=bpe or bytes"
            )
        if not cfg.max_tokens or cfg.max_tokens < 1:
            raise ValueError("data.streaming=true needs data.max_tokens=<tokens to keep>")


def token_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """How often each id occurs in ``tokens``, read in chunks (a memory-mapped split)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for i in range(0, len(tokens), 2**24):
        counts += np.bincount(tokens[i : i + 2**24], minlength=vocab_size)[:vocab_size]
    return counts


def unigram_entropy(tokens: np.ndarray, vocab_size: int) -> float:
    """The loss (nats/token) of predicting every token by the train split's token frequencies:
    the plateau a language model leaves when it starts to use context."""
    counts = token_counts(tokens, vocab_size)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def window_batch(tokens: np.ndarray, offsets: torch.Tensor, block_size: int):
    """(x, y) for windows starting at ``offsets``: one gather, y is x shifted by one."""
    view = np.lib.stride_tricks.sliding_window_view(tokens, block_size + 1)
    chunk = torch.from_numpy(view[offsets.numpy()].astype(np.int64))  # (B, T+1)
    return chunk[:, :-1], chunk[:, 1:]


class TextDataModule(StepDataModule):
    """Next-token prediction windows over memory-mapped token files."""

    def __init__(self, cfg: TextDataConfig, block_size: int, batch_size: int, seed: int):
        super().__init__()
        check_text_config(cfg)
        if cfg.val_batches < 1 or batch_size < 1 or block_size < 1:
            raise ValueError("data.val_batches, data.batch_size and model.block_size must be >= 1")
        self.cfg, self.block_size, self.batch_size, self.seed = cfg, block_size, batch_size, seed
        self.start_step = 0
        self.tokenizer: Tokenizer | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:
            return
        entry, tokenizer = prepare_text(self.cfg)
        train, val = entry.array("train"), entry.array("val")
        need = self.block_size + 1
        if self.cfg.streaming and len(train) < self.batch_size * need:
            raise ValueError(
                f"the stream gave {len(train)} train tokens, fewer than one batch "
                f"({self.batch_size} x {need}); raise data.max_tokens or use a bigger corpus"
            )
        for name, part in (("train", train), ("val", val)):
            if len(part) < need:
                raise ValueError(
                    f"{name} split has {len(part)} tokens but block_size+1={need} are needed; "
                    "lower model.block_size, adjust data.val_fraction, or use more text"
                )
        self.cache_path: Path = entry.path
        self.identity = entry.identity  # recorded with the run: a resume checks it
        self.unigram_loss = unigram_entropy(train, tokenizer.vocab_size)  # the whole corpus's
        if self.cfg.train_tokens is not None:
            if not need < self.cfg.train_tokens <= len(train):
                raise ValueError(
                    f"data.train_tokens={self.cfg.train_tokens} must lie in ({need}, "
                    f"{len(train)}]: more than one window (block_size+1), at most the train split"
                )
            train = train[: self.cfg.train_tokens]
        self.train_tokens, self.val_tokens = train, val
        # UTF-8 bytes each id stands for: the task turns val/loss into val/bpb with it.
        self.token_bytes = torch.from_numpy(self._bytes_table(tokenizer, entry, val))
        self.tokenizer = tokenizer

    def _bytes_table(self, tokenizer: Tokenizer, entry, val: np.ndarray) -> np.ndarray:
        """Bytes per id, scaled so that the val split's ids add up to its text's UTF-8 bytes
        (recorded when the cache was built). A lossless tokenizer needs no scaling; one that
        loses text (unknown tokens) would otherwise give a bpb against the bytes its ids decode
        to: it is flagged (``lossy_tokenizer``) and measured against the real bytes."""
        table = tokenizer.token_bytes()
        text_bytes = entry.meta.get("splits", {}).get("val", {}).get("bytes")
        decoded = int(token_counts(val, len(table)) @ table)
        self.lossy_tokenizer = bool(text_bytes) and decoded != text_bytes
        if not self.lossy_tokenizer:
            return table
        print(
            f"warning: data.tokenizer={self.cfg.tokenizer} does not give back the val text "
            f"({decoded} bytes decoded, {text_bytes} in the text); val/bpb divides by the "
            "text's bytes",
            flush=True,
        )
        return table * (text_bytes / max(decoded, 1))

    @property
    def vocab(self) -> list[str]:
        tok = self._ready()
        if isinstance(tok, CharVocab):
            return tok.chars
        return [tok.decode([i]) for i in range(tok.vocab_size)]

    @property
    def vocab_size(self) -> int:
        return self._ready().vocab_size

    def encode(self, text: str) -> torch.Tensor:
        return self._ready().encode(text)

    def decode(self, ids) -> str:
        return self._ready().decode(ids)

    def save_vocab(self, path: str | Path) -> None:
        """The tokenizer as JSON (``load_vocab`` reads it back, e.g. to decode a checkpoint)."""
        import json

        Path(path).write_text(json.dumps(self._ready().to_json()))

    def _ready(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RuntimeError("call dm.setup() before using the vocabulary or the loaders")
        return self.tokenizer

    def checked(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` unless one lies outside the vocabulary: a token file that changed under the
        cache (its checksum is verified when the entry opens) fails here in one line, not in
        the embedding's IndexError."""
        high = int(ids.max()) if ids.numel() else 0
        if high >= self._ready().vocab_size:
            raise ValueError(
                f"token cache {self.cache_path} holds id {high}, outside the vocabulary of "
                f"{self.vocab_size}; delete that directory (it is rebuilt on the next run)"
            )
        return ids

    def train_batch(
        self, step: int, batch_size: int | None = None, rows: slice | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Rows ``rows`` of optimizer step ``step``'s train batch: depend on (seed, step) only."""
        self._ready()
        high = len(self.train_tokens) - self.block_size  # last start leaving T+1 tokens
        b = batch_size or self.batch_size
        offsets = torch.randint(0, high, (b,), generator=step_generator(self.seed, step))
        x, y = window_batch(self.train_tokens, offsets[rows or slice(None)], self.block_size)
        return self.checked(x), self.checked(y)

    def train_dataloader(self) -> DataLoader:
        self._ready()
        return DataLoader(
            StepBatches(self.train_batch, self.batch_size, self.start_step), batch_size=None
        )

    @property
    def val_batches(self) -> int:
        if self.cfg.val_tokens is None:
            return self.cfg.val_batches
        return max(1, math.ceil(self.cfg.val_tokens / (self.batch_size * self.block_size)))

    def val_dataloader(self) -> DataLoader:
        """``val_batches`` batches of evenly spaced windows over the val split, same every call."""
        self._ready()
        n = self.val_batches * self.batch_size
        last = len(self.val_tokens) - self.block_size - 1
        offsets = torch.linspace(0, last, n).round().long()
        x, y = window_batch(self.val_tokens, offsets, self.block_size)
        self.checked(x), self.checked(y)
        batches = list(zip(x.split(self.batch_size), y.split(self.batch_size), strict=True))
        return DataLoader(batches, batch_size=None)
