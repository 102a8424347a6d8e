"""One SQLite file behind one connection and one writer thread, with ordered migrations.

Every call runs on a dedicated single-thread executor: it keeps blocking SQLite work off the
event loop, gives the connection the single thread it was made on, and serialises writes so a
file always has exactly one writer. The calls made in one turn of the loop go over together,
as one job, in the order they were made.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import sqlite_utils

from atlas.errors import AtlasError

log = logging.getLogger(__name__)

T = TypeVar("T")
MigrationFn = Callable[[sqlite_utils.Database], None]
Migration = tuple[str, MigrationFn]

MIGRATIONS_TABLE = "_migrations"


def utc_now_iso() -> str:
    """The current time as an ISO 8601 UTC string, always with microseconds so strings sort."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def apply_migrations(
    db: sqlite_utils.Database, migrations: Sequence[Migration], where: Path | str
) -> list[str]:
    """Apply the migrations not yet recorded, each in its own transaction; return their names."""
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
        "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    applied = {row["name"] for row in db.query(f"SELECT name FROM {MIGRATIONS_TABLE}")}
    known = {name for name, _ in migrations}
    unknown = sorted(applied - known)
    if unknown:
        raise AtlasError(
            f"{where} has migration(s) this version of Atlas does not know: "
            f"{', '.join(unknown)}. It was written by a newer Atlas; upgrade Atlas to open it."
        )
    done: list[str] = []
    for name, migrate in migrations:
        if name in applied:
            continue
        try:
            with db.atomic():
                migrate(db)
                db[MIGRATIONS_TABLE].insert({"name": name, "applied_at": utc_now_iso()})
        except sqlite3.Error as exc:
            raise AtlasError(f"{where}: migration {name!r} failed: {exc}") from exc
        done.append(name)
    return done


def _run_batch(
    loop: asyncio.AbstractEventLoop,
    batch: list[tuple[Callable[[sqlite_utils.Database], Any], asyncio.Future[Any]]],
    db: sqlite_utils.Database | None,
) -> None:
    """On the writer thread: each call in order, each result (or error) to its own future."""
    outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
    for fn, future in batch:
        try:
            outcomes.append((future, fn(db), None))
        except BaseException as exc:  # the caller gets it, whatever it is
            outcomes.append((future, None, exc))
    try:
        loop.call_soon_threadsafe(_settle, outcomes)
    except RuntimeError:  # the loop closed meanwhile: nobody is left to hear
        log.warning("database work finished after its event loop closed")


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, value, exc in outcomes:
        if future.cancelled():
            continue
        if exc is None:
            future.set_result(value)
        else:
            future.set_exception(exc)


class Database:
    """One SQLite file (WAL, foreign keys on), its migrations, and a single writer thread."""

    def __init__(
        self, path: Path, migrations: Sequence[Migration], *, busy_timeout: float = 5.0
    ) -> None:
        names = [name for name, _ in migrations]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"migration names must be unique; repeated: {', '.join(duplicates)}")
        self.path = Path(path)
        self.migrations = list(migrations)
        self.busy_timeout = busy_timeout
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite_utils.Database | None = None
        self._closed = False
        self._batch: list[tuple[Callable[[sqlite_utils.Database], Any], asyncio.Future[Any]]] = []

    @property
    def is_open(self) -> bool:
        return self._db is not None and not self._closed

    async def open(self) -> None:
        """Open the file (creating it and its folder), set pragmas, apply pending migrations."""
        if self._closed:
            raise AtlasError(f"database {self.path} was closed; make a new Database to reopen it")
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="atlas-db")
        loop = asyncio.get_running_loop()
        try:
            self._db = await loop.run_in_executor(self._executor, self._connect)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    def _connect(self) -> sqlite_utils.Database:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout)
        try:
            # No plugins: the store must not behave differently with whatever is installed.
            db = sqlite_utils.Database(conn, execute_plugins=False)
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            db.enable_wal()
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            applied = apply_migrations(db, self.migrations, self.path)
        except BaseException:
            conn.close()
            raise
        if applied:
            log.info("%s: applied migrations %s", self.path, ", ".join(applied))
        return db

    async def call(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run `fn(db)` on the writer thread; it finishes even if the caller is cancelled."""
        if self._executor is None or self._db is None or self._closed:
            state = "closed" if self._closed else "not open yet"
            raise AtlasError(f"database {self.path} is {state}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._batch.append((fn, future))
        if len(self._batch) == 1:
            loop.call_soon(self._flush)
        try:
            # The shield keeps a queued or running write from being dropped with its caller.
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._report_orphan)
            raise

    def _flush(self) -> None:
        """Hand the calls made since the last flush to the writer thread as one job: under
        load many arrive in one turn of the loop, and each crossing to the thread and back
        costs more CPU than most calls themselves (docs/benchmarks.md)."""
        batch, self._batch = self._batch, []
        if batch and self._executor is not None:
            self._executor.submit(_run_batch, asyncio.get_running_loop(), batch, self._db)

    def _report_orphan(self, future: asyncio.Future[object]) -> None:
        # Nobody awaits a cancelled caller's work any more, so its failure is logged here.
        if not future.cancelled() and future.exception() is not None:
            log.error(
                "%s: work finished after its caller was cancelled, and failed",
                self.path,
                exc_info=future.exception(),
            )

    async def close(self) -> None:
        """Wait for pending work, close the connection and stop the writer thread."""
        if self._closed:
            return
        self._closed = True
        executor, db = self._executor, self._db
        if executor is None:
            return
        self._flush()  # calls made in this turn of the loop run before the close
        self._db = None
        self._executor = None
        loop = asyncio.get_running_loop()
        try:
            if db is not None:
                # FIFO executor: this runs after every call already queued.
                await asyncio.shield(loop.run_in_executor(executor, db.close))
        finally:
            # Never blocks the loop: queued work (and the close) still run before the thread ends.
            executor.shutdown(wait=False)

    async def __aenter__(self) -> Database:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
