"""Which `atlas run` processes may serve one PostgreSQL home at once.

A plain `atlas run` serves every bot and runs the routines; a node (`atlas run --node NAME`)
serves the bots whose leases it holds. A plain daemon beside anything else of the same
database would answer messages twice. So every `atlas run` of a PostgreSQL home holds one
session-level advisory lock on a connection of its own for its whole life: a node shares it,
a plain daemon holds it alone. PostgreSQL drops a session's locks when its connection ends, so
a process that dies, even by SIGKILL, frees it with no lease to wait out.
"""

from __future__ import annotations

import asyncpg

from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer

# Any fixed number every Atlas takes: "ATLR". Other than the schema's (atlas/store/pg/server.py).
RUN_LOCK = 0x41544C52

# The lock's holders other than us, by mode (a single bigint key: classid 0, objid the key).
_HOLDERS = (
    "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = 0 AND objid::bigint = $1 AND objsubid = 1 AND pid <> pg_backend_pid()"
)


class RunLock:
    """The advisory lock of one `atlas run` process: `take` it, `release` it when stopping."""

    def __init__(self, server: PgServer) -> None:
        self.server = server
        self._conn: asyncpg.Connection | None = None

    async def take(self, node: str | None) -> None:
        """Shared for a node, alone for a plain daemon; an AtlasError names what runs."""
        conn = await self.server.connect_alone()
        try:
            function = "pg_try_advisory_lock_shared" if node else "pg_try_advisory_lock"
            if await conn.fetchval(f"SELECT {function}($1)", RUN_LOCK):
                self._conn = conn
                return
            modes = {str(row["mode"]) for row in await conn.fetch(_HOLDERS, RUN_LOCK)}
        except BaseException:
            await conn.close()
            raise
        await conn.close()
        where = self.server.where
        if node is not None:
            raise AtlasError(
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
        raise AtlasError(
            f"{what} of this home is running on its PostgreSQL store {where}: a second "
            "`atlas run` would serve every bot twice; stop it first, or run each process with "
            "--node NAME"
        )

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()  # the session ends: PostgreSQL frees its lock
