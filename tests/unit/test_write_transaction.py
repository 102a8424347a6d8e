"""write_transaction (atlas/store/db.py): a transaction that reads and then writes while another
connection (another worker process, for a spread bot's conversations.db) commits in between.
sqlite-utils' deferred atomic() fails at once with "database is locked"; BEGIN IMMEDIATE makes
the other writer wait instead."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import sqlite_utils

from atlas.store.db import write_transaction


def connect(path: Path) -> sqlite_utils.Database:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA busy_timeout = 5000")
    return sqlite_utils.Database(conn)


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[sqlite_utils.Database, sqlite_utils.Database]]:
    path = tmp_path / "conversations.db"
    first = connect(path)
    first["messages"].insert({"id": 1, "text": "hello"}, pk="id")
    second = connect(path)
    yield first, second
    first.conn.close()
    second.conn.close()


def read_then_write(
    db: sqlite_utils.Database,
    other: sqlite_utils.Database,
    transaction: Callable[[sqlite_utils.Database], AbstractContextManager[object]],
) -> threading.Thread:
    """In `db`: read, let `other` commit (in a thread, as another process would), then write."""
    other_done = threading.Event()

    def other_writes() -> None:
        other["messages"].insert({"id": 3, "text": "from the other process"})
        other_done.set()

    thread = threading.Thread(target=other_writes)
    with transaction(db):
        db.execute("SELECT max(id) FROM messages").fetchone()
        thread.start()
        other_done.wait(0.5)  # committed at once (deferred), or waiting for us (immediate)
        db["messages"].insert({"id": 2, "text": "from this process"})
    return thread


def test_a_deferred_transaction_fails_at_once(two: tuple[sqlite_utils.Database, ...]) -> None:
    first, second = two
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        read_then_write(first, second, lambda db: db.atomic()).join()


def test_write_transaction_makes_the_other_writer_wait(two: tuple[sqlite_utils.Database, ...]) -> None:  # fmt: skip
    first, second = two
    read_then_write(first, second, write_transaction).join(5)
    rows = [row["id"] for row in first.query("SELECT id FROM messages ORDER BY id")]
    assert rows == [1, 2, 3]


def test_nested_it_is_a_savepoint(two: tuple[sqlite_utils.Database, ...]) -> None:
    first, _second = two
    with write_transaction(first):
        with pytest.raises(RuntimeError), write_transaction(first):
            first["messages"].insert({"id": 9, "text": "rolled back"})
            raise RuntimeError("inner fails")
        first["messages"].insert({"id": 4, "text": "kept"})
    assert [row["id"] for row in first.query("SELECT id FROM messages")] == [1, 4]
