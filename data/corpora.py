"""Text corpora, read through HF datasets as "pieces": rows of a ``text`` column whose
concatenation, in order, is the corpus (documents joined by newlines, cut to ``max_chars``).

Sources (``data.source``):
  pydocs      English text of Python's own docs (``pydoc_data.topics``); ships with CPython.
  text_files  local text files, each file one document (read in chunks: any size).
  hf_text     a Hugging Face hub dataset id plus its text column (needs the hub, or a warm cache);
              with ``data.streaming=true`` its rows are streamed instead (``stream_docs``).

Split rule: the first ``1 - val_fraction`` of the corpus's characters is train, the rest is val,
contiguous, so no window straddles both; a piece that straddles the boundary is cut in two.
Each source also has a key: what identifies its content in the cache fingerprint, cheap to
compute (a hash of pydocs, the size and mtime of text files, the hub id and revision).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from data.cache import checksum
from data.hub import load_hub_dataset

SOURCES = ("pydocs", "text_files", "hf_text")
CHUNK_CHARS = 1 << 16  # text files are read in pieces of this many chars


def check_source(cfg: Any) -> None:
    if cfg.source not in SOURCES:
        raise ValueError(f"unknown data.source {cfg.source!r}; choose one of {list(SOURCES)}")


def _pydocs() -> list[str]:
    try:
        from pydoc_data.topics import topics
    except ImportError as err:
        raise FileNotFoundError(
            "pydoc_data is missing from this Python; use data=text_files data.paths=[...]"
        ) from err
    return [topics[k] for k in sorted(topics)]


def _checked_files(paths: list[str]) -> list[Path]:
    if not paths:
        raise ValueError("data.source=text_files needs files: set data.paths=[a.txt,b.txt]")
    for p in paths:
        if not Path(p).is_file():
            raise FileNotFoundError(f"text file not found: {p}; fix data.paths")
        if Path(p).stat().st_size == 0:
            raise ValueError(f"text file is empty: {p}; remove it from data.paths")
        with open(p, "rb") as f:  # text never holds NUL bytes; binary files almost always do
            if b"\x00" in f.read(1 << 16):
                raise ValueError(
                    f"{p} holds NUL bytes: it is binary, not text; remove it from data.paths"
                )
    return [Path(p).resolve() for p in paths]


HASHED_BYTES = 256 * 2**20


def source_key(cfg: Any) -> dict:
    """What identifies the corpus's content, for the cache fingerprint."""
    check_source(cfg)
    if cfg.source == "pydocs":
        digest = hashlib.sha256("\n".join(_pydocs()).encode()).hexdigest()
        return {"source": "pydocs", "sha256": digest}
    if cfg.source == "text_files":
        paths = _checked_files(list(cfg.paths))
        # Up to HASHED_BYTES in all the files' content is part of the key (an edit that keeps
        # the size and mtime is seen; ~0.3 s per 256 MB); above it, their size and mtime only.
        hashed = sum(p.stat().st_size for p in paths) <= HASHED_BYTES
        files = [
            {"path": str(p), "size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
            | ({"blake2b": checksum(p)} if hashed else {})
            for p in paths
        ]
        return {"source": "text_files", "files": files, "encoding": cfg.encoding}
    if not cfg.hf_id:
        raise ValueError("data.source=hf_text needs data.hf_id=<hub dataset id>")
    return {
        "source": "hf_text",
        "hf_id": cfg.hf_id,
        "hf_config": cfg.hf_config,
        "split": cfg.hf_split,
        "revision": cfg.hf_revision or "main",
        "column": cfg.text_column,
    }


# ---------------------------------------------------------------- pieces


def _file_chunks(paths: tuple[str, ...], encoding: str) -> Iterator[dict]:
    for i, path in enumerate(paths):
        with open(path, encoding=encoding) as f:
            if i:
                yield {"text": "\n"}
            while chunk := f.read(CHUNK_CHARS):
                yield {"text": chunk}


def _decode_error(err: BaseException) -> bool:
    while err is not None:
        if isinstance(err, UnicodeDecodeError):
            return True
        err = err.__cause__ or err.__context__
    return False


def _files_pieces(cfg: Any, workdir: Path):
    import datasets

    files = [str(p) for p in _checked_files(list(cfg.paths))]
    key = source_key(cfg)
    try:
        return datasets.Dataset.from_generator(
            _file_chunks,
            # a tuple: datasets would shard a list across generator calls, one file each
            gen_kwargs={"paths": tuple(files), "encoding": cfg.encoding},
            cache_dir=str(workdir),
            fingerprint=hashlib.sha256(repr(key).encode()).hexdigest()[:16],
        )
    except Exception as err:
        if _decode_error(err):
            raise ValueError(
                f"cannot decode data.paths as {cfg.encoding}; convert the files to UTF-8 "
                "or set data.encoding"
            ) from err
        raise


def _hub_pieces(cfg: Any, workdir: Path):
    fallback = "use data=text_files data.paths=[...] with local files"
    ds = load_hub_dataset(cfg.hf_id, cfg.hf_config, cfg.hf_split, fallback)
    if cfg.text_column not in ds.column_names:
        raise ValueError(
            f"{cfg.hf_id} has no column {cfg.text_column!r}; set data.text_column to one of "
            f"{ds.column_names}"
        )
    ds = ds.select_columns([cfg.text_column])
    if cfg.text_column != "text":
        ds = ds.rename_column(cfg.text_column, "text")
    if cfg.max_chars is not None:  # read only the rows that max_chars covers
        ends = np.cumsum(lengths(ds)[0] + 1)
        ds = ds.select(range(min(len(ds), int(np.searchsorted(ends, cfg.max_chars)) + 1)))
    return ds.map(
        _newline_after,
        fn_kwargs={"last": len(ds) - 1},
        batched=True,
        with_indices=True,
        input_columns=["text"],
        cache_file_name=str(workdir / "joined.arrow"),
        new_fingerprint=hashlib.sha256(repr(source_key(cfg)).encode()).hexdigest()[:16],
        desc="joining documents",
    )


def _newline_after(texts: list[str], idx: list[int], last: int) -> dict:
    return {"text": [t + "\n" * (i != last) for t, i in zip(texts, idx, strict=True)]}


def corpus_pieces(cfg: Any, workdir: Path):
    """The corpus as a ``datasets.Dataset`` of pieces, cut to ``max_chars``; intermediate files
    go to ``workdir``."""
    import datasets

    check_source(cfg)
    if cfg.source == "pydocs":
        docs = _pydocs()
        ds = datasets.Dataset.from_dict({"text": [d + "\n" for d in docs[:-1]] + docs[-1:]})
    elif cfg.source == "text_files":
        ds = _files_pieces(cfg, workdir)
    else:
        ds = _hub_pieces(cfg, workdir)
    if cfg.max_chars is not None:
        ds = cut(ds, cfg.max_chars)[0]
    return ds


def have_datasets() -> bool:
    """Whether the datasets library can be imported (a bare GPU machine may lack it)."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        return False
    return True


def local_pieces(cfg: Any) -> list[str]:
    """``corpus_pieces`` for the local sources as a list of strings, without datasets."""
    check_source(cfg)
    if cfg.source == "pydocs":
        docs = _pydocs()
        pieces = [d + "\n" for d in docs[:-1]] + docs[-1:]
    elif cfg.source == "text_files":
        files = tuple(str(p) for p in _checked_files(list(cfg.paths)))
        try:
            pieces = [row["text"] for row in _file_chunks(files, cfg.encoding)]
        except UnicodeDecodeError as err:
            raise ValueError(
                f"cannot decode data.paths as {cfg.encoding}; convert the files to UTF-8 "
                "or set data.encoding"
            ) from err
    else:
        raise ValueError(
            "data=hf_text needs the datasets library: pip install datasets, or use "
            "data=pydocs / data=text_files"
        )
    return pieces if cfg.max_chars is None else cut_list(pieces, cfg.max_chars)[0]


def cut_list(pieces: list[str], n_chars: int) -> tuple[list[str], list[str]]:
    """``cut`` for a list of strings: the pieces of the first ``n_chars`` chars, and the rest."""
    seen = 0
    for i, piece in enumerate(pieces):
        if seen + len(piece) > n_chars:
            inside = n_chars - seen
            if inside == 0:
                return pieces[:i], pieces[i:]
            return pieces[:i] + [piece[:inside]], [piece[inside:], *pieces[i + 1 :]]
        seen += len(piece)
    return pieces, []


def split_list(pieces: list[str], val_fraction: float) -> tuple[list[str], list[str]]:
    n_chars = sum(map(len, pieces))
    return cut_list(pieces, n_chars - int(n_chars * val_fraction))


def list_batches(pieces: list[str], max_chars: int | None, rows: int = 256):
    """``text_batches`` over a list of strings."""
    seen = 0
    for start in range(0, len(pieces), rows):
        batch = pieces[start : start + rows]
        yield batch
        seen += sum(map(len, batch))
        if max_chars is not None and seen >= max_chars:
            return


def load_text(cfg: Any) -> str:
    """The whole corpus as one string (for small corpora and tests)."""
    with tempfile.TemporaryDirectory() as tmp:
        return "".join(corpus_pieces(cfg, Path(tmp))["text"])


def lengths(ds) -> tuple[np.ndarray, np.ndarray]:
    """(chars, UTF-8 bytes) of every piece, computed by Arrow without building Python strings."""
    import pyarrow.compute as pc

    chars, nbytes = [], []
    for table in ds.with_format("arrow").iter(batch_size=65536):
        col = table.column(0)
        chars.append(pc.utf8_length(col).to_numpy(zero_copy_only=False))
        nbytes.append(pc.binary_length(col).to_numpy(zero_copy_only=False))
    if not chars:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(chars).astype(np.int64), np.concatenate(nbytes).astype(np.int64)


def cut(ds, n_chars: int):
    """(head, tail): the pieces holding the first ``n_chars`` characters, and the rest."""
    import datasets

    ends = np.cumsum(lengths(ds)[0])
    k = int(np.searchsorted(ends, n_chars, side="right"))  # rows wholly inside the head
    inside = n_chars - (int(ends[k - 1]) if k else 0)
    head, tail = [_rows(ds, 0, k)], [_rows(ds, k, len(ds))]
    if k < len(ds) and inside > 0:
        row = ds[k]["text"]
        head.append(datasets.Dataset.from_dict({"text": [row[:inside]]}, features=ds.features))
        tail = [
            datasets.Dataset.from_dict({"text": [row[inside:]]}, features=ds.features),
            _rows(ds, k + 1, len(ds)),
        ]
    return datasets.concatenate_datasets(head), datasets.concatenate_datasets(tail)


def _rows(ds, start: int, stop: int):
    return ds.select(range(start, stop)) if stop > start else ds.select([])


def split_pieces(ds, val_fraction: float):
    """(train, val): the last ``int(chars * val_fraction)`` characters are val."""
    n_chars = int(lengths(ds)[0].sum())
    return cut(ds, n_chars - int(n_chars * val_fraction))


def text_batches(ds, max_chars: int | None = None, rows: int = 256) -> Iterator[list[str]]:
    """Lists of piece texts, stopping once ``max_chars`` characters were handed out."""
    seen = 0
    for batch in ds.iter(batch_size=rows):
        yield batch["text"]
        seen += sum(map(len, batch["text"]))
        if max_chars is not None and seen >= max_chars:
            return


# ---------------------------------------------------------------- streaming


def stream_docs(cfg: Any) -> Iterator[str]:
    """Documents of a hub dataset read as a stream, each after the first led by a newline."""
    if cfg.source != "hf_text":
        raise ValueError(
            f"data.streaming=true reads hub datasets; data.source={cfg.source} is not one: "
            "use data=hf_text, or data.streaming=false"
        )
    fallback = "use data=text_files data.paths=[...] with local files"
    stream = load_hub_dataset(cfg.hf_id, cfg.hf_config, cfg.hf_split, fallback, streaming=True)
    for i, row in enumerate(stream):
        if cfg.text_column not in row:
            raise ValueError(
                f"{cfg.hf_id} has no column {cfg.text_column!r}; set data.text_column to one "
                f"of {sorted(row)}"
            )
        yield row[cfg.text_column] if i == 0 else "\n" + row[cfg.text_column]


def batched(docs: Iterator[str], rows: int = 256) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == rows:
            yield batch
            batch = []
    if batch:
        yield batch


def auto_num_proc(num_proc: int | None, n_bytes: int) -> int:
    """Processes for tokenizing: one below 64 MB (starting workers costs more), else the cores."""
    if num_proc:
        return int(num_proc)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 1 if n_bytes < 64 * 2**20 else max(1, min(8, cores or 1))
