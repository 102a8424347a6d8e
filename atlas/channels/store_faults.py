"""Whether a failure to take a person's message in is the store being unable to write (a full
disk, an I/O error, a read-only file): then the channel holds the message unconfirmed for as
long as that lasts, instead of giving up on it after a few tries as it does for other faults."""

from __future__ import annotations

import errno
import sqlite3

# What a disk that cannot take more says; a message waits for it, however long that lasts.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})
HELD_PAUSE_MAX = 30.0  # seconds between tries of a held message, at most


def store_cannot_write(exc: BaseException) -> str | None:
    """SQLite's or the file system's reason (`database or disk is full`), or None when the
    failure is something else (a fault in handling that one message)."""
    if isinstance(exc, sqlite3.DatabaseError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        return exc.strerror or str(exc)
    return None
