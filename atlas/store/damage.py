"""A damaged SQLite file, told in words: which file, what is wrong, how to recover.

`check_database_file` looks at a file's 100-byte header without SQLite, so a garbage or
truncated file is refused before anything opens it: SQLite itself would create `-wal` and
`-shm` files beside it first. Damage inside a file: atlas/store/integrity.py (quick_check).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from atlas.errors import AtlasError

MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26


class DamagedDatabase(AtlasError):
    """A database file that SQLite cannot use as it is."""


def damaged_message(path: Path, problem: str) -> str:
    """The whole error: the file, what is wrong, and the two ways out."""
    return (
        f"{path} is damaged: {problem}.\n"
        "Atlas left it as it is. To recover, either:\n"
        f"  sqlite3 {path} .recover | sqlite3 {path}.recovered\n"
        f"  (then move {path.name}.recovered in its place), or\n"
        f"  move {path} aside, with its -wal and -shm files if any: Atlas then starts it empty."
    )


def header_problem(path: Path) -> str | None:
    """What the header says is wrong with an existing file, or None (absent and empty files
    are fine: SQLite makes them a database)."""
    try:
        with path.open("rb") as f:
            header = f.read(HEADER_BYTES)
            size = f.seek(0, 2)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if not header:
        return None
    if len(header) < HEADER_BYTES or not header.startswith(MAGIC):
        return "it is not a SQLite database (its first bytes are not a SQLite header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count is only meaningful when SQLite marked it valid (offset 92 == offset 24),
    # and only settled when no write-ahead log may still hold pages (a checkpoint cut short).
    counted = header[92:96] == header[24:28] and pages > 0
    wal = path.with_name(path.name + "-wal")
    if counted and size < pages * page_size and not (wal.exists() and wal.stat().st_size):
        return (
            f"it is truncated ({size} bytes, but its header counts {pages} pages of "
            f"{page_size} bytes = {pages * page_size})"
        )
    return None


def check_database_file(path: Path) -> None:
    """Raise DamagedDatabase when the file is plainly not a usable database."""
    if problem := header_problem(path):
        raise DamagedDatabase(damaged_message(path, problem))


def is_damage(exc: sqlite3.Error) -> bool:
    """SQLite's own verdict that the file is no database or a damaged one (SQLITE_NOTADB,
    SQLITE_CORRUPT), not a lock, a full disk or a mistake in a statement."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # an error raised without SQLite's code: judge by its words
        return "not a database" in str(exc) or "malformed" in str(exc)
    return code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB)


def damaged_error(path: Path, exc: sqlite3.Error) -> DamagedDatabase | None:
    """SQLite's error on opening, as a DamagedDatabase when it tells of damage; None else."""
    if not is_damage(exc):
        return None
    return DamagedDatabase(damaged_message(path, f"SQLite says: {exc}"))


__all__ = [
    "DamagedDatabase",
    "check_database_file",
    "damaged_error",
    "damaged_message",
    "header_problem",
    "is_damage",
]
