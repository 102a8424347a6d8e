"""A home's PostgreSQL server: the connection pool and the schema's version.

Several processes (and, later, several machines) open the same database at once, so the schema
steps are applied under a transaction-level advisory lock: one process applies them, the others
wait and then find them applied. A database written by a newer Atlas (a version above ours) is
refused, as a newer SQLite file is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import asyncpg

from atlas.errors import AtlasError
from atlas.store.db import utc_now_iso
from atlas.store.pg.schema import SCHEMA_VERSION, STEPS

log = logging.getLogger(__name__)

# What a connection attempt raises when the server is out of reach or refuses us.
_UNREACHABLE = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
# Any fixed number: every Atlas process takes the same lock around schema changes.
_SCHEMA_LOCK = 0x41544C53  # "ATLS"
# For the sessions that hold something for a process's life (the run lock, LISTEN): the
# server probes an idle client after 10 s, every 5 s, and ends the session after 3 unanswered
# probes. A machine that vanished without closing its connection (power lost, network cut)
# then frees its lock within about 25 s, not after the system's default of two hours. Over a
# Unix socket the server ignores them.
SESSION_KEEPALIVE = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
}
# A pooled session idle inside a transaction this long is ended by the server. Atlas's own
# transactions wait on nothing but the database (a send to a platform happens between them), so
# one idle for seconds belongs to a process that is paused or stuck; its row locks would hold
# back the others meanwhile: a lease's takeover waits on a paused holder's fence (FOR SHARE),
# for as long as the pause lasts. Its transaction rolls back; the work is the next owner's.
IDLE_IN_TRANSACTION = 5.0
T = TypeVar("T")
_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


class StoreUnreachable(AtlasError):
    """The server cannot be reached, or refused the connection."""


async def until_reached(attempt: Callable[[], Awaitable[T]], pause: float, what: str) -> T:
    """`attempt()` again every `pause` seconds while the server cannot be reached or drops the
    connection midway (a restart, a cut network); any other error is the caller's."""
    while True:
        try:
            return await attempt()
        except (StoreUnreachable, *_UNREACHABLE) as exc:
            log.info("%s: the PostgreSQL store is not back yet (%s); trying again", what, exc)
            await asyncio.sleep(pause)


async def applied_steps(conn: asyncpg.Connection) -> set[int]:
    """The schema steps recorded as applied, none for a database Atlas has not written yet."""
    exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        return set()
    return {int(row[0]) for row in await conn.fetch("SELECT version FROM schema_version")}


async def current_version(conn: asyncpg.Connection) -> int:
    """The highest schema step applied, 0 for a database Atlas has not written yet."""
    return max(await applied_steps(conn), default=0)


async def apply_schema(conn: asyncpg.Connection, where: str) -> list[int]:
    """Apply the steps not yet recorded, each in its own transaction; return their numbers.

    A step is applied when its number is missing, not when it is above the highest recorded:
    the parts of the home number their steps in ranges of their own (atlas/store/pg/schema.py),
    so a database can hold step 20 and still lack step 11 added by a later Atlas.
    """
    done: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        await conn.execute(_VERSION_TABLE)
        version = await current_version(conn)
    if version > SCHEMA_VERSION:
        raise AtlasError(
            f"{where} has schema version {version}, newer than this Atlas knows "
            f"({SCHEMA_VERSION}): it was written by a newer Atlas; upgrade Atlas to use it."
        )
    for number, name, statements in STEPS:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            if number in await applied_steps(conn):
                continue  # applied before, or by another process while we waited for the lock
            try:
                for statement in statements:
                    await conn.execute(statement)
            except asyncpg.PostgresError as exc:
                raise AtlasError(f"{where}: schema step {number} ({name}) failed: {exc}") from exc
            await conn.execute(
                "INSERT INTO schema_version (version, name, applied_at) VALUES ($1, $2, $3)",
                number,
                name,
                utc_now_iso(),
            )
            done.append(number)
    return done


@dataclass(frozen=True)
class ServerCheck:
    """What `atlas doctor` reports of the server."""

    server_version: str
    schema_version: int
    latency_ms: float  # the median of a few round trips of `SELECT 1`
    encoding: str  # the database's; search needs UTF8
    unicode_case: bool  # lower() folds more than ASCII (a UTF-8 LC_CTYPE): ILIKE finds "ÉTÉ"


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset of a released connection, after asyncpg's own local one (which rolls
    back a transaction left open). asyncpg's default also sends `pg_advisory_unlock_all();
    CLOSE ALL; UNLISTEN *; RESET ALL`: a round trip on every release, a quarter of a turn's
    round trips (docs/benchmarks.md, issue 36), undoing session state Atlas never makes on a
    pooled connection (its advisory locks are per transaction, its cursors live inside
    transactions, it runs no SET, and it LISTENs on a connection of its own)."""


class PgServer:
    """The pool to one database, its schema brought up to date when opened."""

    def __init__(
        self,
        url: str,
        password: str | None = None,
        *,
        max_connections: int = 10,
        idle_in_transaction: float | None = IDLE_IN_TRANSACTION,
    ):
        """`idle_in_transaction`: seconds (see IDLE_IN_TRANSACTION); None for a copy that
        builds its rows between statements of one long transaction (`atlas store migrate`)."""
        self.url = url
        self.password = password
        self.max_connections = max_connections
        self.idle_in_transaction = idle_in_transaction
        self._pool: asyncpg.Pool | None = None

    @property
    def where(self) -> str:
        """The address without its password, for messages."""
        return redact_url(self.url)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise AtlasError(f"the PostgreSQL store {self.where} is not open")
        return self._pool

    async def open(self, *, migrate: bool = True) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                password=self.password,
                min_size=1,
                max_size=self.max_connections,
                reset=_keep_session,
                server_settings=self._session_settings(),
            )
        except _UNREACHABLE as exc:
            raise self._unreachable(exc) from exc
        if migrate:
            try:
                async with self._pool.acquire() as conn:
                    applied = await apply_schema(conn, self.where)
            except BaseException:
                await self.close()
                raise
            if applied:
                log.info("%s: applied schema steps %s", self.where, applied)

    def _session_settings(self) -> dict[str, str]:
        if self.idle_in_transaction is None:
            return {}
        return {"idle_in_transaction_session_timeout": str(int(self.idle_in_transaction * 1000))}

    async def connect_alone(self) -> asyncpg.Connection:
        """A connection of its own, outside the pool, for what lives as long as a session (a
        lock held for the process's life); a server out of reach raises as `open` does."""
        try:
            return await asyncpg.connect(
                self.url, password=self.password, server_settings=SESSION_KEEPALIVE
            )
        except _UNREACHABLE as exc:
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: BaseException) -> StoreUnreachable:
        return StoreUnreachable(f"cannot reach the PostgreSQL store {self.where}: {exc}")

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def check(self, round_trips: int = 5) -> ServerCheck:
        """The server's version, the schema's version and the round-trip time."""
        async with self.pool.acquire() as conn:
            server = str(await conn.fetchval("SHOW server_version"))
            version = await current_version(conn)
            times = []
            for _ in range(round_trips):
                start = time.perf_counter()
                await conn.fetchval("SELECT 1")
                times.append((time.perf_counter() - start) * 1000)
            encoding = str(await conn.fetchval("SHOW server_encoding"))
            unicode_case = encoding == "UTF8" and bool(
                await conn.fetchval("SELECT lower('ÉΣЖ') = 'éσж'")
            )
        return ServerCheck(server, version, sorted(times)[len(times) // 2], encoding, unicode_case)

    async def __aenter__(self) -> PgServer:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def redact_url(url: str) -> str:
    """A postgresql:// address with any password in it replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
