"""Which `atlas run` processes may serve one PostgreSQL home at once.

A plain `atlas run` serves every bot and runs the routines; a node (`atlas run --node NAME`)
serves the bots whose leases it holds. A plain daemon beside anything else of the same
database would answer messages twice. So every `atlas run` of a PostgreSQL home holds one
session-level advisory lock on a connection of its own for its whole life: a node shares it,
a plain daemon holds it alone. PostgreSQL drops a session's locks when its connection ends, so
a process that dies, even by SIGKILL, frees it with no lease to wait out.

The same rule frees it when only the connection ends (the server restarted, the backend
terminated, the network cut): the process still serves, so it takes the lock again at once,
retrying while the server is out of reach. If another `atlas run` took it in between, this
process is the one too many: `on_lost` is told why, and the daemon stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer, until_reached

# Any fixed number every Atlas takes: "ATLR". Other than the schema's (atlas/store/pg/server.py).
RUN_LOCK = 0x41544C52

log = logging.getLogger(__name__)


class RunLockHeld(AtlasError):
    """Another `atlas run` of the home holds the lock in a way that excludes this one."""


REGAIN_PAUSE = 1.0  # seconds between tries to reach the server again after the lock's loss

# The lock's holders other than us, by mode (a single bigint key: classid 0, objid the key).
_HOLDERS = (
    "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = 0 AND objid::bigint = $1 AND objsubid = 1 AND pid <> pg_backend_pid()"
)


class RunLock:
    """The advisory lock of one `atlas run` process: `take` it, `release` it when stopping."""

    def __init__(self, server: PgServer, on_lost: Callable[[str], None] | None = None) -> None:
        self.server = server
        self.on_lost = on_lost  # told why, when another process took the lock meanwhile
        self._conn: asyncpg.Connection | None = None
        self._node: str | None = None
        self._regaining: asyncio.Task[None] | None = None
        self.regained = 0  # how often the lock was taken again after its connection ended

    async def take(self, node: str | None) -> None:
        """Shared for a node, alone for a plain daemon; an AtlasError names what runs."""
        self._node = node
        self._hold(await self._try(node))

    async def _try(self, node: str | None) -> asyncpg.Connection:
        """A connection holding the lock, or an AtlasError naming what holds it instead."""
        conn = await self.server.connect_alone()
        try:
            function = "pg_try_advisory_lock_shared" if node else "pg_try_advisory_lock"
            if await conn.fetchval(f"SELECT {function}($1)", RUN_LOCK):
                return conn
            modes = {str(row["mode"]) for row in await conn.fetch(_HOLDERS, RUN_LOCK)}
        except BaseException:
            await conn.close()
            raise
        await conn.close()
        raise self._refusal(node, modes)

    def _hold(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        conn.add_termination_listener(self._connection_ended)

    def _connection_ended(self, conn: asyncpg.Connection) -> None:
        if conn is not self._conn:
            return  # released on purpose, or an earlier connection
        self._conn = None
        log.warning(
            "the run lock's connection to the PostgreSQL store %s ended; taking the lock again",
            self.server.where,
        )
        self._regaining = asyncio.get_running_loop().create_task(self._regain())

    async def _regain(self) -> None:
        try:
            conn = await until_reached(lambda: self._try(self._node), REGAIN_PAUSE, "run lock")
        except RunLockHeld as exc:
            why = f"this process lost the home's run lock and could not take it again: {exc}"
            log.error("%s", why)
            if self.on_lost is not None:
                self.on_lost(why)
            return
        self._hold(conn)
        self.regained += 1
        log.warning("the run lock is held again")

    def _refusal(self, node: str | None, modes: set[str]) -> RunLockHeld:
        where = self.server.where
        if node is not None:
            return RunLockHeld(
                f"a plain `atlas run` (without --node) of this home is running on its PostgreSQL "
                f"store {where}: it serves every bot, so `atlas run --node {node}` beside it "
                "would answer them a second time; stop it first and run every process of the "
                "home with --node NAME"
            )
        what = (
            "a plain `atlas run` (without --node)"
            if "ExclusiveLock" in modes or not modes
            else "a node (`atlas run --node`)"
        )
        return RunLockHeld(
            f"{what} of this home is running on its PostgreSQL store {where}: a second "
            "`atlas run` would serve every bot twice; stop it first, or run each process with "
            "--node NAME"
        )

    async def release(self) -> None:
        regaining, self._regaining = self._regaining, None
        if regaining is not None:
            regaining.cancel()
            await asyncio.gather(regaining, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()  # the session ends: PostgreSQL frees its lock
