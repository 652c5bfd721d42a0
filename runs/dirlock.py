"""One process at a time in a directory: an exclusive ``flock`` on ``<dir>/.lock``, held while
the object lives and dropped by the OS when the process dies (so a killed holder never leaves a
stale lock). The file holds the holder's PID, which a refusal names. Imports neither torch nor
Lightning: a sweep takes its sweep dir's lock before any job starts.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from runs.errors import Refused


class RunDirLock:
    """An exclusive lock on ``<directory>/.lock`` for as long as this process holds the object;
    ``what`` and ``fix`` word the refusal (a run dir, a sweep dir)."""

    def __init__(
        self, directory: Path, what: str = "run dir", fix: str = "another run dir"
    ) -> None:
        self.path = Path(directory) / ".lock"
        self.what, self.fix = what, fix
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Refused(
                f"{self.path.parent} is being written by another process (PID {holder}); wait "
                f"for it to end or stop it (a killed sweep's workers too), or pick {self.fix}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None
