"""Read connections of one SQLite file, beside its writer: searches and long reads run here.

In WAL mode a reader sees the last commit and neither waits for the writer nor holds it up, so a
search over a million messages never delays another conversation's append (it did when every
read shared the writer's thread). Each reader thread keeps its own connection, made read-only
with `query_only`: a read that tried to write would fail here rather than race the writer.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import sqlite_utils

T = TypeVar("T")
READER_THREADS = 2  # searches side by side; each holds a connection and its page cache


class Readers:
    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """`fn(db)` on a reader thread's own connection. A cancelled caller leaves the read to
        finish on its thread (a read changes nothing)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="atlas-read")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._on_thread, fn)

    def _on_thread(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        db: sqlite_utils.Database | None = getattr(self._local, "db", None)
        if db is None:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, check_same_thread=False, isolation_level=None
            )
            conn.execute("PRAGMA query_only = 1")
            db = self._local.db = sqlite_utils.Database(conn, execute_plugins=False)
            with self._lock:
                self._connections.append(conn)
        return fn(db)

    def close(self) -> None:
        """Stop the threads once their reads end, and close their connections."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
