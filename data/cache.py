"""The on-disk cache of prepared data: a directory per fingerprint, built once, trusted only whole.

    <cache_dir>/<kind>/<label>-<sha256(fingerprint)[:16]>/   meta.json + the arrays it lists

An entry is built in a temporary sibling directory and renamed into place when complete, under a
file lock, so a build killed half way is never read, and two jobs that need the same entry at once
build it once: the second waits for the lock, then finds the entry. meta.json, written last,
records the fingerprint and every file's size, mtime and BLAKE2b checksum; an entry whose meta is
missing, unreadable or of another fingerprint, whose files are missing or differ in size, or
whose checksums differ is rebuilt, never trained on. Checksums are verified on every open for
entries up to VERIFY_BYTES (the embedded corpora: milliseconds), and for larger ones whenever a
file's mtime is no longer the one recorded at the build.

``cache_dir`` defaults to $NORMLAB_CACHE, else $XDG_CACHE_HOME/normlab, else ~/.cache/normlab.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runs.runfiles import write_atomic

FORMAT = 2  # bump when the layout of an entry changes: old entries are then rebuilt
META = "meta.json"
VERIFY_BYTES = 256 * 2**20  # entries up to this size are checksummed on every open


def default_cache_dir() -> Path:
    if os.environ.get("NORMLAB_CACHE"):
        return Path(os.environ["NORMLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "normlab"


def cache_root(cache_dir: str | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else default_cache_dir()


def entry_dir(root: Path, kind: str, label: str, fingerprint: dict) -> Path:
    blob = json.dumps({"format": FORMAT, **fingerprint}, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return root / kind / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)[:60]}-{digest}"


class NoRoomError(ValueError):
    """The cache's disk cannot hold what is to be written; the message names the fix."""


def no_room(where: Path, need: int | None = None) -> NoRoomError:
    free = shutil.disk_usage(_existing(where)).free
    need_s = f"needs about {need / 2**20:.0f} MB, " if need else ""
    return NoRoomError(
        f"no room for the data cache in {where} ({need_s}{free / 2**20:.0f} MB free); "
        "free space there or set data.cache_dir=<a directory on a bigger disk>"
    )


def check_room(where: Path, need: int) -> None:
    """Fail before writing when the disk clearly cannot hold ``need`` bytes."""
    if shutil.disk_usage(_existing(where)).free < need:
        raise no_room(where, need)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# ---------------------------------------------------------------- reading an entry


@dataclass
class Entry:
    path: Path
    meta: dict

    @property
    def identity(self) -> str:
        """What a run records of its data: the entry (its fingerprint) and its files' checksums."""
        sums = {name: f["blake2b"] for name, f in self.meta.get("files", {}).items()}
        blob = json.dumps(sums, sort_keys=True).encode()
        return f"{self.path.name}:{hashlib.sha256(blob).hexdigest()[:12]}"

    def array(self, name: str, mode: str = "r") -> np.ndarray:
        """A memory-mapped array of the entry (dtype and shape from meta.json)."""
        spec = self.meta["arrays"][name]
        shape = tuple(spec["shape"])
        if int(np.prod(shape)) == 0:
            return np.zeros(shape, dtype=spec["dtype"])
        return np.memmap(self.path / spec["file"], dtype=spec["dtype"], mode=mode, shape=shape)


def problem(path: Path, fingerprint: dict) -> str | None:
    """Why the entry at ``path`` cannot be trusted, or None when it can."""
    try:
        meta = json.loads((path / META).read_text())
    except (OSError, ValueError):
        return f"{META} is missing or unreadable"
    if meta.get("format") != FORMAT or meta.get("fingerprint") != _plain(fingerprint):
        return "its fingerprint does not match"
    for name, spec in meta["arrays"].items():
        file = path / spec["file"]
        want = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        have = file.stat().st_size if file.exists() else -1
        if have != want and want:
            return f"{spec['file']} holds {max(have, 0)} bytes, not {want} ({name})"
    files = meta.get("files", {})
    always = sum(f["size"] for f in files.values()) <= VERIFY_BYTES
    for name, want in files.items():
        file = path / name
        if not file.is_file() or file.stat().st_size != want["size"]:
            return f"{name} is missing or not {want['size']} bytes"
        if (always or file.stat().st_mtime_ns != want["mtime_ns"]) and checksum(file) != want[
            "blake2b"
        ]:
            return f"{name} does not match the checksum recorded when it was built"
    return None


def checksum(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def file_records(directory: Path) -> dict:
    """Size, mtime and checksum of every file of an entry (meta.json aside)."""
    return {
        p.name: {"size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns, "blake2b": checksum(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != META
    }


def _plain(value: dict) -> dict:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


# ---------------------------------------------------------------- building an entry


def prepared(path: Path, fingerprint: dict, build: Callable[[Path], dict], log=print) -> Entry:
    """The entry at ``path``, built by ``build(tmp_dir) -> {"arrays": ..., ...}`` if needed."""
    from filelock import FileLock, Timeout

    if problem(path, fingerprint) is None:
        return _read(path)
    lock = FileLock(str(path) + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=1)
    except Timeout:
        log(f"waiting for another process to finish preparing {path}")
        lock.acquire()
    except OSError as err:  # read-only, no permission
        raise OSError(
            err.errno,
            f"cannot write the data cache in {path.parent} ({err.strerror}); set "
            "data.cache_dir=<a writable directory> (or $NORMLAB_CACHE)",
        ) from err
    try:
        why = problem(path, fingerprint)
        if why is None:  # built by the process that held the lock
            return _read(path)
        if path.exists():
            log(f"data cache {path} cannot be trusted ({why}); rebuilding it")
            shutil.rmtree(path)
        for stale in path.parent.glob(f".{path.name}.tmp-*"):  # a build killed half way
            shutil.rmtree(stale, ignore_errors=True)
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        try:
            meta = build(tmp)
            _fsync_dir(tmp)
            meta = {"format": FORMAT, "fingerprint": _plain(fingerprint), **meta}
            meta["files"] = file_records(tmp)
            write_atomic(tmp / META, json.dumps(meta, indent=1))
            os.rename(tmp, path)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise no_room(path.parent) from err
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        lock.release()
    return _read(path)


def _read(path: Path) -> Entry:
    return Entry(path, json.loads((path / META).read_text()))


def _fsync_dir(path: Path) -> None:
    for file in path.iterdir():
        with open(file, "rb") as f:
            os.fsync(f.fileno())


class ArrayWriter:
    """Appends arrays of one dtype to ``<dir>/<name>.bin``; ``spec()`` describes the result."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype, row_shape: tuple = ()):
        self.file = f"{name}.bin"
        self.dtype, self.row_shape, self.rows = np.dtype(dtype), tuple(row_shape), 0
        self._f = open(directory / self.file, "wb")  # noqa: SIM115 (closed in close())

    def write(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self._f.write(values.tobytes())
        self.rows += values.shape[0] if values.ndim else 1

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()

    def spec(self) -> dict:
        return {"file": self.file, "dtype": self.dtype.name, "shape": [self.rows, *self.row_shape]}


def progress(iterable, total: int | None, desc: str):
    """A tqdm bar on a terminal (datasets already depends on tqdm); the bare iterable otherwise."""
    if not sys.stderr.isatty():
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit_scale=True)
