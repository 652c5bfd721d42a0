"""Small helpers shared by the data tests."""

from __future__ import annotations

import hashlib
from pathlib import Path


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def take(loader, n: int) -> list:
    it = iter(loader)
    return [next(it) for _ in range(n)]


def digest(tensors) -> str:
    """sha256 over each tensor's shape, dtype and bytes: equal digests mean bit-identical data."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
