"""Tokenizers, by name (``data.tokenizer=``):

  char     one id per character of the train split, plus one unknown id (the default for pydocs)
  bytes    one id per UTF-8 byte: vocab 256, nothing to train
  bpe      byte-level BPE trained with Hugging Face ``tokenizers`` on the train split, with
           ``data.vocab_size`` ids; saved as tokenizer.json in the token cache and reused
  <path>   a tokenizer.json file written by Hugging Face ``tokenizers``
  <hub id> the tokenizer.json of a hub model (e.g. ``gpt2``): online, or already in the HF cache

Every tokenizer knows how many UTF-8 bytes each id stands for (``token_bytes``), so that a
validation loss in nats per token converts to bits per byte, the unit that compares tokenizers:

    bpb = sum_t loss_t / (ln 2 * sum_t bytes(y_t))

For ``char`` an id unseen in train (the unknown id) counts as the 3 bytes of U+FFFD it decodes to.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from data.hub import check_hub, offline_flag

UNK = "\ufffd"  # shown for chars the train text never contained
BYTE_ALPHABET = 256
TRAINED = ("char", "bpe")  # fitted on the train split; the rest are fixed before any data is read
NAMES = ("char", "bytes", "bpe")


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned dtype that holds every id: 2 bytes per token up to 65,536 ids."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class CharVocab:
    """index -> char list with one unknown id; encode/decode are vectorized over code points."""

    kind = "char"

    def __init__(self, chars: list[str], unk_id: int):
        self.chars, self.unk_id = list(chars), unk_id
        codes = np.array([ord(c) for c in self.chars], dtype=np.int64)
        self._table = np.full(int(codes.max()) + 1, unk_id, dtype=np.int64)
        self._table[codes] = np.arange(len(codes))

    @classmethod
    def from_chars(cls, chars: Iterable[str]) -> CharVocab:
        chars = sorted(set(chars))
        if UNK not in chars:
            chars.append(UNK)
        return cls(chars, chars.index(UNK))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def encode_np(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        known = codes < len(self._table)
        return np.where(known, self._table[np.minimum(codes, len(self._table) - 1)], self.unk_id)

    def encode(self, text: str) -> torch.Tensor:
        return torch.from_numpy(self.encode_np(text))

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode_np(t) for t in texts]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in _id_list(ids))

    def token_bytes(self) -> np.ndarray:
        return np.array([len(c.encode("utf-8")) for c in self.chars], dtype=np.int64)

    def to_json(self) -> dict:
        return {"kind": "char", "chars": self.chars, "unk_id": self.unk_id}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()))


class ByteTokenizer:
    """UTF-8 bytes as ids."""

    kind = "bytes"
    vocab_size = BYTE_ALPHABET

    def encode_np(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def encode(self, text: str) -> torch.Tensor:
        return torch.from_numpy(self.encode_np(text))

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode_np(t) for t in texts]

    def decode(self, ids) -> str:
        return bytes(_id_list(ids)).decode("utf-8", errors="replace")

    def token_bytes(self) -> np.ndarray:
        return np.ones(BYTE_ALPHABET, dtype=np.int64)

    def to_json(self) -> dict:
        return {"kind": "bytes"}


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer`` (trained BPE, a tokenizer.json, a hub tokenizer)."""

    kind = "hf"

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_str(cls, blob: str) -> HFTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(blob))

    def encode_np(self, text: str) -> np.ndarray:
        return np.asarray(self.tok.encode(text).ids, dtype=np.int64)

    def encode(self, text: str) -> torch.Tensor:
        return torch.from_numpy(self.encode_np(text))

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int64) for e in self.tok.encode_batch_fast(texts)]

    def decode(self, ids) -> str:
        return self.tok.decode(_id_list(ids))

    def token_bytes(self) -> np.ndarray:
        """Byte-level vocabularies spell each byte as one char; others decode id by id."""
        from tokenizers import decoders, pre_tokenizers

        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        byte_level = isinstance(self.tok.decoder, decoders.ByteLevel)
        sizes = np.zeros(self.vocab_size, dtype=np.int64)
        for i in range(self.vocab_size):
            piece = self.tok.id_to_token(i) or ""
            if byte_level and set(piece) <= alphabet:
                sizes[i] = len(piece)
            else:
                sizes[i] = len(self.tok.decode([i]).encode("utf-8"))
        return sizes

    def to_json(self) -> dict:
        return {"kind": "hf", "tokenizer": self.tok.to_str()}

    def save(self, path: str | Path) -> None:
        self.tok.save(str(path))


Tokenizer = CharVocab | ByteTokenizer | HFTokenizer


def _id_list(ids) -> list[int]:
    return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]


def from_json(blob: dict) -> Tokenizer:
    """The tokenizer a ``to_json`` dict describes (a dict without ``kind`` is a char vocab)."""
    kind = blob.get("kind", "char")
    if kind == "char":
        return CharVocab(blob["chars"], blob["unk_id"])
    if kind == "bytes":
        return ByteTokenizer()
    return HFTokenizer.from_str(blob["tokenizer"])


# ---------------------------------------------------------------- fitting on the train split


def fit_char(batches: Iterator[list[str]]) -> CharVocab:
    """The sorted set of train chars plus the unknown id."""
    seen: set[str] = set()
    for texts in batches:
        for text in texts:
            seen.update(text)
    return CharVocab.from_chars(seen)


def fit_bpe(batches: Iterator[list[str]], vocab_size: int) -> HFTokenizer:
    """Byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) with ``vocab_size`` ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(batches, trainer)
    return HFTokenizer(tok)


def check_vocab_size(name: str, vocab_size: int) -> None:
    if name == "bpe" and vocab_size < BYTE_ALPHABET:
        raise ValueError(
            f"data.vocab_size={vocab_size} is below the {BYTE_ALPHABET} byte ids byte-level BPE "
            f"starts from; set data.vocab_size >= {BYTE_ALPHABET} (e.g. 8192)"
        )


# ---------------------------------------------------------------- fixed tokenizers by name


def is_trained(name: str) -> bool:
    return name in TRAINED


def fixed_key(name: str, revision: str | None = None) -> dict:
    """What identifies a fixed tokenizer in the cache fingerprint, without loading it."""
    if name == "bytes":
        return {"tokenizer": "bytes"}
    path = Path(name).expanduser()
    if path.is_file():
        return {"tokenizer": "file", "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if name.endswith(".json") or name.startswith((".", "/", "~")):
        raise FileNotFoundError(
            f"tokenizer file not found: {name}; fix data.tokenizer (char, bytes, bpe, "
            "a tokenizer.json path or a hub id)"
        )
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        raise ValueError(
            f"unknown tokenizer {name!r}; choose one of {', '.join(NAMES)}, "
            "a tokenizer.json path, or a hub id"
        )
    return {"tokenizer": "hub", "id": name, "revision": revision or "main"}


def load_fixed(name: str, revision: str | None = None) -> Tokenizer:
    """bytes, a tokenizer.json file, or a hub tokenizer (fails in seconds when unreachable)."""
    key = fixed_key(name, revision)
    if key["tokenizer"] == "bytes":
        return ByteTokenizer()
    path = Path(name).expanduser() if key["tokenizer"] == "file" else None
    path = path or Path(_hub_tokenizer_file(name, revision))
    try:
        return HFTokenizer.from_str(path.read_text(errors="replace"))
    except Exception as err:  # tokenizers raises its own Exception type for a bad file
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise ValueError(
            f"{path} is not a tokenizers JSON file ({reason}); fix data.tokenizer={name}"
        ) from err


def _hub_tokenizer_file(repo: str, revision: str | None) -> str:
    from huggingface_hub import hf_hub_download

    fix = f"choose one of {', '.join(NAMES)}, a tokenizer.json path, or a hub id"
    where = f"data.tokenizer={repo!r}"
    offline = check_hub(where, f"use data.tokenizer=bpe ({fix})")
    try:
        return hf_hub_download(repo, "tokenizer.json", revision=revision, local_files_only=offline)
    except Exception as err:  # hub errors come in many types; one line either way
        if offline or offline_flag():
            raise ConnectionError(
                f"{where} is not char, bytes or bpe, not a file, and not in the local HF cache "
                f"(HF_HUB_OFFLINE is set); {fix}, or go online once to fetch it"
            ) from err
        reason = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise ValueError(f"unknown tokenizer {repo!r} ({reason}); {fix}") from err


def load_vocab(path: str | Path) -> Tokenizer:
    """The tokenizer a run dir's vocab.json holds (written by ``TextDataModule.save_vocab``)."""
    return from_json(json.loads(Path(path).read_text()))
