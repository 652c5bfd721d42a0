"""Prepare once, train many: a corpus tokenized into one flat token file per split.

    <cache_dir>/text/<source>-<tokenizer>-<fingerprint>/
        meta.json          fingerprint, dtype, tokens / chars / UTF-8 bytes per split
        train.bin val.bin  token ids, uint16 (uint32 when the vocab exceeds 65,536 ids)
        tokenizer.json     the trained BPE or the given tokenizer (vocab.json for char / bytes)

The fingerprint is (source content key, tokenizer and its vocab size, split rule), so changing
any of them prepares a new entry and an unchanged config reuses the old one (data/cache.py makes
the build atomic and safe to race). Pieces are tokenized with ``datasets.map(batched,
num_proc)``; training then reads random windows straight from the memory-mapped files, so memory
does not grow with the corpus.

With ``data.streaming=true`` the hub dataset is streamed (never stored whole) and tokenized until
``data.max_tokens``; the first ``1 - val_fraction`` of those tokens is train, the rest val.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from data import corpora
from data.cache import ArrayWriter, Entry, cache_root, check_room, entry_dir, prepared, progress
from data.tokenizer import (
    HFTokenizer,
    Tokenizer,
    fit_bpe,
    fit_char,
    fixed_key,
    from_json,
    is_trained,
    load_fixed,
    token_dtype,
)


def cache_key(cfg: Any) -> dict:
    """What decides the token files: the corpus, the tokenizer, the split rule."""
    if is_trained(cfg.tokenizer):
        tok = {"tokenizer": cfg.tokenizer}
        if cfg.tokenizer == "bpe":
            tok.update(vocab_size=cfg.vocab_size, train_chars=cfg.bpe_train_chars)
    else:
        tok = fixed_key(cfg.tokenizer)
    if cfg.streaming:
        split = {"rule": "stream_tokens", "val_fraction": cfg.val_fraction, "max": cfg.max_tokens}
    else:
        split = {"rule": "chars", "val_fraction": cfg.val_fraction, "max_chars": cfg.max_chars}
    return {"source": corpora.source_key(cfg), "tokenizer": tok, "split": split}


def label(cfg: Any) -> str:
    name = Path(cfg.tokenizer).stem if not is_trained(cfg.tokenizer) else cfg.tokenizer
    size = str(cfg.vocab_size) if cfg.tokenizer == "bpe" else ""
    return f"{cfg.source}-{name}{size}"


def prepare_text(cfg: Any, log: Callable[[str], None] = print) -> tuple[Entry, Tokenizer]:
    """The cache entry of ``cfg``'s token files (built now if missing or untrustworthy) and its
    tokenizer."""
    fp = cache_key(cfg)
    path = entry_dir(cache_root(cfg.cache_dir), "text", label(cfg), fp)
    entry = prepared(path, fp, lambda tmp: _build(cfg, tmp, log), log)
    return entry, load_tokenizer(entry)


def load_tokenizer(entry: Entry) -> Tokenizer:
    blob = (entry.path / entry.meta["tokenizer_file"]).read_text()
    if entry.meta["tokenizer_file"] == "tokenizer.json":
        return HFTokenizer.from_str(blob)
    return from_json(json.loads(blob))


def _save_tokenizer(tok: Tokenizer, directory: Path) -> str:
    if isinstance(tok, HFTokenizer):
        tok.save(directory / "tokenizer.json")
        return "tokenizer.json"
    (directory / "vocab.json").write_text(json.dumps(tok.to_json()))
    return "vocab.json"


def _tokenizer(cfg: Any, batches: Callable[[int | None], Iterator[list[str]]], log) -> Tokenizer:
    """Fit char / bpe on the train text that ``batches(max_chars)`` hands out; or load one."""
    if cfg.tokenizer == "char":
        return fit_char(batches(None))
    if cfg.tokenizer == "bpe":
        log(f"training byte-level BPE with {cfg.vocab_size} ids on the train split")
        return fit_bpe(batches(cfg.bpe_train_chars), cfg.vocab_size)
    return load_fixed(cfg.tokenizer)


def _build(cfg: Any, tmp: Path, log) -> dict:
    if cfg.streaming:
        return _build_streamed(cfg, tmp, log)
    if not corpora.have_datasets():
        return _build_in_memory(cfg, tmp, log)
    work = tmp / "work"
    tok = None if is_trained(cfg.tokenizer) else load_fixed(cfg.tokenizer)  # fails fast offline
    train, val = corpora.split_pieces(corpora.corpus_pieces(cfg, work), cfg.val_fraction)
    tok = tok or _tokenizer(cfg, lambda limit: corpora.text_batches(train, limit), log)
    dtype = token_dtype(tok.vocab_size)
    arrays, splits = {}, {}
    for name, part in (("train", train), ("val", val)):
        chars, nbytes = (int(a.sum()) for a in corpora.lengths(part))
        # Upper bound on tokens: one per char (char), per byte (bytes); BPE stays well below
        # half a token per byte. Twice: datasets' intermediate Arrow file holds them too.
        tokens = chars if cfg.tokenizer == "char" else nbytes
        check_room(tmp, 2 * tokens * dtype.itemsize // (1 if tok.kind != "hf" else 2))
        num_proc = corpora.auto_num_proc(cfg.num_proc, nbytes)
        arrays[name] = _encode_split(part, tok, dtype, tmp, name, num_proc)
        splits[name] = {"chars": chars, "bytes": nbytes, "tokens": arrays[name]["shape"][0]}
    shutil.rmtree(work, ignore_errors=True)
    return {
        "arrays": arrays,
        "splits": splits,
        "vocab_size": tok.vocab_size,
        "tokenizer_file": _save_tokenizer(tok, tmp),
    }


def _encode_rows(batch: dict, tokenizer: Tokenizer, dtype: str) -> dict:
    return {"ids": [ids.astype(dtype) for ids in tokenizer.encode_batch(batch["text"])]}


@contextmanager
def _quiet_fork(num_proc: int):
    """HF tokenizers warn in every forked worker once their thread pool has run (BPE training);
    workers get one thread each anyway."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    if num_proc > 1:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def _encode_split(part, tok: Tokenizer, dtype: np.dtype, tmp: Path, name: str, num_proc: int):
    """Token ids of ``part`` into ``<tmp>/<name>.bin``, through an Arrow file in tmp/work."""
    import datasets

    writer = ArrayWriter(tmp, name, dtype)
    if len(part):
        features = datasets.Features({"ids": datasets.Sequence(datasets.Value(dtype.name))})
        with _quiet_fork(num_proc):
            out = part.map(
                _encode_rows,
                batched=True,
                batch_size=64,
                num_proc=num_proc if num_proc > 1 else None,
                remove_columns=["text"],
                fn_kwargs={"tokenizer": tok, "dtype": dtype.name},
                features=features,
                cache_file_name=str(tmp / "work" / f"{name}-ids.arrow"),
                new_fingerprint=hashlib.sha256(f"{tmp}/{name}".encode()).hexdigest()[:16],
                desc=f"tokenizing {name}",
            )
        for table in out.with_format("arrow").iter(batch_size=1024):
            ids = table.column("ids").combine_chunks().flatten()
            writer.write(ids.to_numpy(zero_copy_only=False))
    writer.close()
    return writer.spec()


# ---------------------------------------------------------------- without the datasets library


def _build_in_memory(cfg: Any, tmp: Path, log) -> dict:
    """The same entry as ``_build``, for a local corpus held in memory: a machine without the
    datasets library (a bare GPU box) still trains on pydocs or text files. Pieces, split and
    per-piece encoding follow the datasets path, so the token files are identical."""
    train, val = corpora.split_list(corpora.local_pieces(cfg), cfg.val_fraction)
    tok = None if is_trained(cfg.tokenizer) else load_fixed(cfg.tokenizer)
    tok = tok or _tokenizer(cfg, lambda limit: corpora.list_batches(train, limit), log)
    dtype = token_dtype(tok.vocab_size)
    arrays, splits = {}, {}
    for name, part in (("train", train), ("val", val)):
        writer = ArrayWriter(tmp, name, dtype)
        for texts in corpora.list_batches(part, None):
            for ids in tok.encode_batch(texts):
                writer.write(ids)
        writer.close()
        arrays[name] = writer.spec()
        chars, nbytes = sum(map(len, part)), sum(len(t.encode()) for t in part)
        splits[name] = {"chars": chars, "bytes": nbytes, "tokens": arrays[name]["shape"][0]}
    return {
        "arrays": arrays,
        "splits": splits,
        "vocab_size": tok.vocab_size,
        "tokenizer_file": _save_tokenizer(tok, tmp),
    }


# ---------------------------------------------------------------- streaming


def _limited(batches: Iterator[list[str]], max_chars: int | None) -> Iterator[list[str]]:
    seen = 0
    for texts in batches:
        yield texts
        seen += sum(map(len, texts))
        if max_chars is not None and seen >= max_chars:
            return


def _build_streamed(cfg: Any, tmp: Path, log) -> dict:
    """Tokenize the stream until max_tokens, then move the last val_fraction into val.bin."""
    tok = _tokenizer(cfg, lambda n: _limited(corpora.batched(corpora.stream_docs(cfg)), n), log)
    dtype = token_dtype(tok.vocab_size)
    check_room(tmp, cfg.max_tokens * dtype.itemsize)
    writer, total = ArrayWriter(tmp, "train", dtype), 0
    stream = corpora.batched(corpora.stream_docs(cfg))
    for texts in progress(stream, None, "streaming documents"):
        for ids in tok.encode_batch(texts):
            ids = ids[: cfg.max_tokens - total]
            writer.write(ids)
            total += len(ids)
        if total >= cfg.max_tokens:
            break
    writer.close()
    n_val = int(total * cfg.val_fraction)
    n_train = total - n_val
    with open(tmp / "train.bin", "r+b") as f:
        f.seek(n_train * dtype.itemsize)
        (tmp / "val.bin").write_bytes(f.read())
        f.truncate(n_train * dtype.itemsize)
    spec = {"dtype": dtype.name}
    return {
        "arrays": {
            "train": {**spec, "file": "train.bin", "shape": [n_train]},
            "val": {**spec, "file": "val.bin", "shape": [n_val]},
        },
        "splits": {"train": {"tokens": n_train}, "val": {"tokens": n_val}},
        "vocab_size": tok.vocab_size,
        "tokenizer_file": _save_tokenizer(tok, tmp),
    }
