"""A lock file that several processes on one machine take turns on (``flock``): two sessions
or a watcher and a session that share one cache must not create one clone or worktree at once.

``flock`` locks belong to an open file, so threads of one process that each open the lock file
exclude each other too; the kernel drops the lock when its holder dies, so a killed session
never leaves the cache locked."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfbisect.errors import StepFailed

POLL_S = 0.05


@contextmanager
def held(path: Path, timeout_s: float = 600.0, what: str = "checkout") -> Iterator[None]:
    """Hold the lock file ``path`` (created if missing) for the block; wait at most
    ``timeout_s``, then fail the step naming the file, as a stuck holder is worth reporting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StepFailed(
                        what, f"{path} stayed locked by another process for {timeout_s:.0f} s"
                    ) from None
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock
