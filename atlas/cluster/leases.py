"""Leases: one holder at a time per resource ("bot:NAME", "scheduler"), with fencing epochs.

A lease row is never deleted: a release clears its holder, and every acquisition adds one to
its epoch, so a holder's (node, epoch) pair names one tenure for good. Expiry uses the
database's clock only (`now()`, `clock_timestamp()`).

Fencing: before a side effect (a send), the holder checks in the same transaction that the row
still names its node and epoch and has not expired, taking a `FOR SHARE` lock on the row. Not
`FOR KEY SHARE`: that lock does not conflict with an UPDATE of non-key columns, so a takeover
could commit while the send's transaction is still open. Under `FOR SHARE` the takeover's
UPDATE waits until the send has committed: every send of epoch N lands before epoch N + 1
begins, and a send started after it fails its check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer

SCHEDULER = "scheduler"
BOT_PREFIX = "bot:"


def bot_resource(bot: str) -> str:
    return f"{BOT_PREFIX}{bot}"


class LeaseLost(AtlasError):
    """A lease this node thought it held is no longer its own (expired or taken over)."""


class FenceError(LeaseLost):
    """A side effect was refused: the lease it depends on is no longer held by this tenure."""


@dataclass(frozen=True)
class Fence:
    """What a holder checks before a side effect: (resource, node, epoch) still current."""

    resource: str
    node: str
    epoch: int

    async def check(self, conn: asyncpg.Connection) -> None:
        """Raise FenceError unless this tenure still holds the lease; call inside the side
        effect's transaction (the row stays locked `FOR SHARE` until it ends)."""
        row = await conn.fetchrow(_CURRENT + " FOR SHARE", self.resource)
        if row is None or row["holder"] != self.node or row["epoch"] != self.epoch:
            raise FenceError(
                f"{self.resource}: node {self.node!r} with epoch {self.epoch} may not act: "
                f"{_describe(row)}"
            )
        if not row["live"]:
            raise FenceError(
                f"{self.resource}: node {self.node!r} with epoch {self.epoch} may not act: "
                "its lease expired"
            )


@dataclass(frozen=True)
class Lease:
    resource: str
    holder: str
    epoch: int
    expires_at: datetime

    @property
    def fence(self) -> Fence:
        return Fence(self.resource, self.holder, self.epoch)


@dataclass(frozen=True)
class Holding:
    """A lease row as it stands: who holds it (None when free or expired) and its epoch."""

    resource: str
    holder: str | None
    epoch: int
    expires_at: datetime


_CURRENT = (
    "SELECT holder, epoch, expires_at > clock_timestamp() AS live FROM leases WHERE resource = $1"
)


def _describe(row: asyncpg.Record | None) -> str:
    if row is None:
        return "it has never been held"
    if row["holder"] is None:
        return f"it was released (epoch {row['epoch']})"
    if not row["live"]:
        return f"it expired (held by {row['holder']!r}, epoch {row['epoch']})"
    return f"it is held by {row['holder']!r} with epoch {row['epoch']}"


@asynccontextmanager
async def fenced(server: PgServer, fence: Fence) -> AsyncIterator[asyncpg.Connection]:
    """A transaction whose first statement checks `fence`: what it writes lands only while
    the lease is ours (FenceError otherwise, and nothing is written)."""
    async with server.pool.acquire() as conn, conn.transaction():
        await fence.check(conn)
        yield conn


class Leases:
    """The `leases` table (atlas/store/pg/schema_cluster.py)."""

    def __init__(self, server: PgServer):
        self.server = server

    async def acquire(self, resource: str, node: str, seconds: float) -> Lease | None:
        """Take `resource` for `seconds` when it is free or expired, with epoch + 1, in one
        statement; None when someone holds it (this node included: renew instead)."""
        row = await self.server.pool.fetchrow(
            "INSERT INTO leases AS l (resource, holder, epoch, acquired_at, expires_at) "
            "VALUES ($1, $2, 1, now(), now() + make_interval(secs => $3)) "
            "ON CONFLICT (resource) DO UPDATE SET holder = EXCLUDED.holder, "
            "epoch = l.epoch + 1, acquired_at = clock_timestamp(), "
            "expires_at = clock_timestamp() + make_interval(secs => $3) "
            # clock_timestamp(): the statement may have waited on the row (a fenced send).
            "WHERE l.holder IS NULL OR l.expires_at <= clock_timestamp() "
            "RETURNING epoch, expires_at",
            resource,
            node,
            float(seconds),
        )
        if row is None:
            return None
        return Lease(resource, node, int(row["epoch"]), row["expires_at"])

    async def renew(self, lease: Lease, seconds: float) -> Lease:
        """Extend `lease` by `seconds` from now; LeaseLost when it expired or changed hands.
        An expired lease is not renewed even if nobody took it: its node has treated it as
        lost already (atlas/cluster/node.py) and takes it again under a new epoch."""
        async with self.server.pool.acquire() as conn:
            expires_at = await conn.fetchval(
                "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => $4) "
                "WHERE resource = $1 AND holder = $2 AND epoch = $3 "
                "AND expires_at > clock_timestamp() RETURNING expires_at",
                lease.resource,
                lease.holder,
                lease.epoch,
                float(seconds),
            )
            if expires_at is None:
                row = await conn.fetchrow(_CURRENT, lease.resource)
                raise LeaseLost(
                    f"{lease.resource}: node {lease.holder!r} cannot renew its lease of epoch "
                    f"{lease.epoch}: {_describe(row)}"
                )
        return Lease(lease.resource, lease.holder, lease.epoch, expires_at)

    async def release(self, lease: Lease) -> bool:
        """Give `lease` up now (others may take it at once); False when it was not ours any
        more, which needs no action."""
        released = await self.server.pool.fetchval(
            "UPDATE leases SET holder = NULL, expires_at = clock_timestamp() "
            "WHERE resource = $1 AND holder = $2 AND epoch = $3 RETURNING epoch",
            lease.resource,
            lease.holder,
            lease.epoch,
        )
        return released is not None

    async def holdings(self, prefix: str = "") -> dict[str, Holding]:
        """The lease rows whose resource starts with `prefix`, by resource; holder None when
        free or expired."""
        rows = await self.server.pool.fetch(
            "SELECT resource, CASE WHEN expires_at > clock_timestamp() THEN holder END "
            "AS holder, epoch, expires_at FROM leases WHERE starts_with(resource, $1)",
            prefix,
        )
        return {row["resource"]: Holding(**dict(row)) for row in rows}
