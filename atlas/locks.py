"""A lock on a file shared by processes: the daemon, `atlas chat` and `atlas tool` may all
change the home's USER.md (or migrate the home) at the same moment."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(path: Path) -> Path:
    """The lock file that guards `path`: a hidden sibling, so the file itself can be replaced."""
    return path.with_name(f".{path.name}.lock")


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s lock file until the block ends. Blocking: call it
    from a thread (asyncio.to_thread) when the event loop must not wait. Each call opens the
    file anew, so two threads of one process exclude each other as two processes do."""
    target = lock_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
