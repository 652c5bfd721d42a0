"""last.ckpt written whole or not at all: Lightning's CheckpointIO plugin that writes each
checkpoint beside its target, records its digest, then renames it into place (the digests and
every load: checkpoints.py). Lightning's own save goes through the system temp dir and
``shutil.move``, which copies in place across filesystems.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from training.reliability.checkpoints import (
    disk_error,
    file_digest,
    load_checkpoint,
    recorded_digests,
    write_digests,
)


class WriteErrors:
    """A file that remembers the OSError a write raised: torch.save's zip writer turns it into a
    RuntimeError about the stream, losing the errno (ENOSPC, EFBIG) that names the cause."""

    def __init__(self, file) -> None:
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name: str):
        return getattr(self.file, name)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes ``<path>.tmp`` next to the target, fsyncs it, then renames it over the target, so a
    kill or a full disk at any moment leaves the old checkpoint or the new one, never a mix.
    (Lightning's own save goes through the system temp dir and ``shutil.move``, which copies in
    place across filesystems.) Loading never unpickles code (``weights_only=True``)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as raw:
                f = WriteErrors(raw)
                try:
                    torch.save(checkpoint, f)
                except RuntimeError as err:  # torch's zip writer hides the OSError behind it
                    if f.error is None:
                        raise
                    raise f.error from err
                f.flush()
                os.fsync(f.fileno())
            new = file_digest(tmp)
            # the file on disk now, if it is intact (its digest one recorded): either it or the
            # new one passes while the rename is under way, however many saves a kill cut short
            on_disk = file_digest(path) if path.is_file() else None
            old = [on_disk] if on_disk in recorded_digests(path) else []
            write_digests(path, [new, *old])
            os.replace(tmp, path)
            write_digests(path, [new])
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise disk_error(err, path) from err
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None):
        return load_checkpoint(Path(path))
