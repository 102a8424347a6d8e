"""One SQLite file behind one connection and one writer thread, with ordered migrations.

Two ways in, one connection, so a file always has exactly one writer and calls keep their order:
- `call(fn)` runs on a dedicated single-thread executor: for anything that may take long (a
  search over a million messages, a migration), so the event loop never waits for it. The calls
  made in one turn of the loop go over together, as one job, in the order they were made.
- `quick(fn)` is for a point read or a one-transaction write (microseconds): it runs on the loop
  at once when nothing is queued for the thread, because crossing to a thread and back costs
  far more than such a call itself (docs/benchmarks.md); otherwise it queues like `call`.

Nothing on the loop ever waits for a disk or a lock: the loop's calls never block on another
process's lock (a busy file sends the call to the thread, which waits for it), and commits
never fsync (WAL, synchronous=NORMAL) because checkpoints, which do, run on the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import sqlite_utils

from atlas.errors import AtlasError
from atlas.store.damage import check_database_file, damaged_error, is_damage
from atlas.store.readers import Readers

log = logging.getLogger(__name__)

T = TypeVar("T")
MigrationFn = Callable[[sqlite_utils.Database], None]
Migration = tuple[str, MigrationFn]
UpkeepFn = Callable[[sqlite_utils.Database], object]

MIGRATIONS_TABLE = "_migrations"
# Calls between two checkpoints (the connection's automatic ones are off: they would run in
# whichever commit crossed the line, sometimes on the loop). A turn makes about six calls.
CHECKPOINT_EVERY = 500
# Calls between two runs of a file's upkeep (the messages' full-text indexing: a few
# milliseconds on the thread for the ~50 messages stored meanwhile). Divides CHECKPOINT_EVERY.
UPKEEP_EVERY = 100


def utc_now_iso() -> str:
    """The current time as an ISO 8601 UTC string, always with microseconds so strings sort:
    `datetime.now(UTC).isoformat(timespec="microseconds")`, at less than half its cost (a turn
    stamps five rows), the date and time of day made once per second."""
    seconds, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    return f"{_utc_second(seconds)}.{nanoseconds // 1000:06d}+00:00"


@functools.lru_cache(maxsize=4)
def _utc_second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def iso_utc(timestamp: float) -> str:
    """A POSIX timestamp (a file's mtime) in the same form as `utc_now_iso`."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="microseconds")


def fetch_dicts(
    db: sqlite_utils.Database, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()
) -> list[dict[str, Any]]:
    """Every row of one statement as a dict. sqlite-utils' `query` wraps each statement in a
    savepoint (SAVEPOINT, the statement, RELEASE: three for one SELECT) so that it can undo a
    statement that returns no rows; ours all return rows. Fetched at once, so a statement
    with RETURNING has finished (and, outside a transaction, committed) when this returns."""
    cursor = db.conn.execute(sql, parameters)
    if cursor.description is None:
        raise ValueError(f"fetch_dicts is for statements that return rows, not {sql!r}")
    keys = [column[0] for column in cursor.description]
    return [dict(zip(keys, row, strict=True)) for row in cursor.fetchall()]


def insert_dict(db: sqlite_utils.Database, table: str, row: dict[str, Any]) -> int:
    """Insert one row (names from our own code, never from input) and return its rowid: one
    statement, committed by itself outside a transaction. sqlite-utils' `table.insert` reads
    sqlite_master three times to find the table and wraps the INSERT in BEGIN and COMMIT."""
    columns = ", ".join(f'"{name}"' for name in row)
    marks = ", ".join(f":{name}" for name in row)
    cursor = db.conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', row)
    return int(cursor.lastrowid)  # type: ignore[arg-type]


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
            if _apply_one(db, name, migrate):
                done.append(name)
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise  # the file's fault, not the migration's: named as damage by the opener
            raise AtlasError(f"{where}: migration {name!r} failed: {exc}") from exc
    return done


@contextlib.contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """sqlite-utils' `atomic()`, except that the outermost transaction takes the write lock
    first (BEGIN IMMEDIATE). A deferred transaction that reads and then writes fails at once
    with "database is locked" when another process committed in between (its snapshot is
    stale, so SQLite does not wait out the busy timeout): a spread bot's conversations.db has
    a writer in every worker process. Nested, it is a savepoint, as `atomic()` is."""
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


def _apply_one(db: sqlite_utils.Database, name: str, migrate: MigrationFn) -> bool:
    """Apply one migration unless another process did meanwhile; False if it had. The write
    lock is taken first (BEGIN IMMEDIATE), so two processes opening a new file at once (the
    daemon and an `atlas` command on a fresh home) wait for each other within the busy timeout;
    a deferred transaction would fail at once with "database is locked" when it came to write."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        taken = db.execute(f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = ?", [name]).fetchone()
        if taken is None:
            migrate(db)
            db[MIGRATIONS_TABLE].insert({"name": name, "applied_at": utc_now_iso()})
        db.conn.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    return taken is None


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Another connection holds the lock this statement needed."""
    return "locked" in str(exc) or "busy" in str(exc)


def _checkpoint(db: sqlite_utils.Database) -> None:
    # PASSIVE: copies what it can without waiting for readers; the rest goes next time.
    db.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _run_batch(
    loop: asyncio.AbstractEventLoop,
    batch: list[tuple[Callable[[sqlite_utils.Database], Any], asyncio.Future[Any]]],
    db: sqlite_utils.Database,
    busy_ms: int,
    settle: Callable[[list[tuple[asyncio.Future[Any], Any, BaseException | None]]], None],
) -> None:
    """On the writer thread: each call in order, each result (or error) to its own future.
    Only here may a call wait for another process's lock (the loop's calls never do)."""
    outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
    try:
        db.conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    except sqlite3.Error as exc:  # the connection is unusable: every caller hears why
        outcomes = [(future, None, exc) for _, future in batch]
    else:
        for fn, future in batch:
            try:
                outcomes.append((future, fn(db), None))
            except BaseException as exc:  # the caller gets it, whatever it is
                outcomes.append((future, None, exc))
        with contextlib.suppress(sqlite3.Error):  # the loop's calls must not wait for locks
            db.conn.execute("PRAGMA busy_timeout = 0")
    try:
        loop.call_soon_threadsafe(settle, outcomes)
    except RuntimeError:  # the loop closed meanwhile: nobody is left to hear
        log.warning("database work finished after its event loop closed")


def _settle_each(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
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
        self,
        path: Path,
        migrations: Sequence[Migration],
        *,
        busy_timeout: float = 5.0,
        upkeep: UpkeepFn | None = None,
    ) -> None:
        """`upkeep`: work kept off the hot path that must still happen (see message_index.py).
        It runs on the thread when the file opens, every UPKEEP_EVERY calls, and at close."""
        names = [name for name, _ in migrations]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"migration names must be unique; repeated: {', '.join(duplicates)}")
        self.path = Path(path)
        self.migrations = list(migrations)
        self.busy_timeout = busy_timeout
        self.upkeep = upkeep
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite_utils.Database | None = None
        self._closed = False
        self._batch: list[tuple[Callable[[sqlite_utils.Database], Any], asyncio.Future[Any]]] = []
        self._jobs_running = 0  # handed to the thread and not yet settled on the loop
        self._calls = 0  # counted up to CHECKPOINT_EVERY, then from 0 again
        self._readers = Readers(self.path, busy_timeout)  # searches, beside the writer

    @property
    def _busy_ms(self) -> int:
        """How long the thread's statements wait for another process's lock, as SQLite takes it."""
        return int(self.busy_timeout * 1000)

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
        # A garbage or truncated file is refused before SQLite opens it (and adds files beside).
        check_database_file(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect_checked()
        except sqlite3.Error as exc:
            # Damage the header did not show: named, with the way out, not a bare traceback.
            if damaged := damaged_error(self.path, exc):
                raise damaged from exc
            raise

    def _connect_checked(self) -> sqlite_utils.Database:
        # Shared between this thread and the loop, never at once: see `quick`. Autocommit
        # (isolation_level=None): a lone statement commits itself, with no BEGIN and COMMIT
        # around it; every transaction of more than one statement is explicit
        # (`write_transaction`, sqlite-utils' `atomic`), as sqlite-utils writes its own anyway.
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, check_same_thread=False, isolation_level=None
        )
        try:
            # No plugins: the store must not behave differently with whatever is installed.
            db = sqlite_utils.Database(conn, execute_plugins=False)
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            db.enable_wal()
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA wal_autocheckpoint = 0")
            applied = apply_migrations(db, self.migrations, self.path)
            self._run_upkeep(db)  # what a crash left undone
            db.execute("PRAGMA busy_timeout = 0")  # the thread sets it for each job
        except BaseException:
            conn.close()
            raise
        if applied:
            log.info("%s: applied migrations %s", self.path, ", ".join(applied))
        return db

    def _run_upkeep(self, db: sqlite_utils.Database) -> None:
        """Upkeep at open and close: a failure is logged, not raised, since nothing stored
        is lost by it and the next run does the work (a search runs it again first)."""
        if self.upkeep is None:
            return
        try:
            self.upkeep(db)
        except sqlite3.Error:
            log.warning("%s: upkeep failed; it runs again later", self.path, exc_info=True)

    def _connection(self) -> sqlite_utils.Database:
        if self._executor is None or self._db is None or self._closed:
            state = "closed" if self._closed else "not open yet"
            raise AtlasError(f"database {self.path} is {state}")
        return self._db

    async def quick(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run `fn(db)`, a point read or a single transaction, on the loop at once when the
        thread has nothing of ours; otherwise behind what it has, as `call` would. A call
        that finds the file locked by another process (its transaction rolled back, nothing
        written) goes to the thread, which waits for the lock."""
        db = self._connection()
        if self._batch or self._jobs_running:
            return await self.call(fn)
        self._count_call()
        try:
            result = fn(db)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or db.conn.in_transaction:
                raise
            return await self.call(fn)
        # A turn of the loop after each call, as the thread's calls took: a turn's work then
        # interleaves with the others' in small steps instead of running to its next I/O, so
        # the loop looks at its sockets and timers often (lag p99 under load: see benchmarks).
        await asyncio.sleep(0)
        return result

    async def read(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run `fn(db)`, which only reads, on a connection of its own (atlas/store/readers.py):
        it sees the last commit and never waits for, nor delays, the writer's work."""
        self._connection()  # open, not closed: the same errors as the writer's calls
        return await self._readers.run(fn)

    async def call(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run `fn(db)` on the writer thread; it finishes even if the caller is cancelled."""
        self._connection()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._count_call()
        self._queue(loop, fn, future)
        try:
            # The shield keeps a queued or running write from being dropped with its caller.
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._report_orphan)
            raise

    def _queue(
        self,
        loop: asyncio.AbstractEventLoop,
        fn: Callable[[sqlite_utils.Database], Any],
        future: asyncio.Future[Any],
    ) -> None:
        self._batch.append((fn, future))
        if len(self._batch) == 1:
            loop.call_soon(self._flush)

    def _count_call(self) -> None:
        self._calls += 1
        if self._calls % UPKEEP_EVERY == 0 and self.upkeep is not None:
            self._enqueue_unawaited(self.upkeep)
        if self._calls >= CHECKPOINT_EVERY:
            self._calls = 0
            self._enqueue_unawaited(_checkpoint)

    def _enqueue_unawaited(self, fn: Callable[[sqlite_utils.Database], Any]) -> None:
        """Queue work nobody awaits (it is no call to count): a failure is logged."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        future.add_done_callback(self._report_orphan)
        self._queue(loop, fn, future)

    def _flush(self) -> None:
        """Hand the calls made since the last flush to the writer thread as one job: under
        load many arrive in one turn of the loop, and each crossing to the thread and back
        costs more CPU than most calls themselves (docs/benchmarks.md)."""
        batch, self._batch = self._batch, []
        if batch and self._executor is not None and self._db is not None:
            self._jobs_running += 1
            loop = asyncio.get_running_loop()
            self._executor.submit(_run_batch, loop, batch, self._db, self._busy_ms, self._settle)

    def _settle(
        self, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
    ) -> None:
        self._jobs_running -= 1
        _settle_each(outcomes)

    def _report_orphan(self, future: asyncio.Future[object]) -> None:
        # Nobody awaits a cancelled caller's work any more, so its failure is logged here.
        if not future.cancelled() and future.exception() is not None:
            log.error(
                "%s: work finished with nobody waiting for it, and failed",
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
        await asyncio.to_thread(self._readers.close)  # reads under way end first
        self._db = None
        self._executor = None
        loop = asyncio.get_running_loop()
        try:
            if db is not None:
                # FIFO executor: this runs after every call already queued.
                await asyncio.shield(loop.run_in_executor(executor, self._finish, db))
        finally:
            # Never blocks the loop: queued work (and the close) still run before the thread ends.
            executor.shutdown(wait=False)

    def _finish(self, db: sqlite_utils.Database) -> None:
        """On the thread, last of all: the upkeep, so a closed file is complete, then close."""
        try:
            with contextlib.suppress(sqlite3.Error):  # as in _run_batch: may wait for a lock
                db.conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            self._run_upkeep(db)
        finally:
            db.close()

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
