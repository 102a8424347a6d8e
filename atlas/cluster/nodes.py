"""Nodes: each process serving a home registers under a name and heartbeats.

A node is alive while its heartbeat is younger than the lease time. Only the database's clock
(`now()`) is compared: the machines' clocks differ, and a node judged dead by a fast clock
elsewhere would lose its bots early.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer


class NodeSuperseded(AtlasError):
    """Another process registered under this node's name since: this one must stop."""


@dataclass(frozen=True)
class NodeRecord:
    name: str
    epoch: int
    host: str
    pid: int | None
    started_at: datetime
    heartbeat_at: datetime
    alive: bool


class NodeRegistry:
    """The `nodes` table (atlas/store/pg/schema_cluster.py)."""

    def __init__(self, server: PgServer):
        self.server = server

    async def register(self, name: str) -> int:
        """Register (or re-register) `name`; return its new epoch, which later heartbeats give."""
        if not name or any(ch.isspace() for ch in name):
            raise AtlasError(f"node name {name!r}: give a non-empty name without spaces")
        epoch = await self.server.pool.fetchval(
            "INSERT INTO nodes (name, epoch, host, pid, started_at, heartbeat_at) "
            "VALUES ($1, 1, $2, $3, now(), now()) "
            "ON CONFLICT (name) DO UPDATE SET epoch = nodes.epoch + 1, host = EXCLUDED.host, "
            "pid = EXCLUDED.pid, started_at = now(), heartbeat_at = now(), left_at = NULL "
            "RETURNING epoch",
            name,
            socket.gethostname(),
            os.getpid(),
        )
        return int(epoch)

    async def heartbeat(self, name: str, epoch: int) -> None:
        """Mark `name` alive now; NodeSuperseded when another process took the name since."""
        updated = await self.server.pool.fetchval(
            "UPDATE nodes SET heartbeat_at = now() WHERE name = $1 AND epoch = $2 "
            "AND left_at IS NULL RETURNING epoch",
            name,
            epoch,
        )
        if updated is None:
            raise NodeSuperseded(
                f"node {name!r} (registration {epoch}) is no longer registered: another "
                "process registered under the same name, or it left; this process stops serving"
            )

    async def leave(self, name: str, epoch: int) -> None:
        """Mark `name` gone at once (a clean stop), so the others need not wait for expiry."""
        await self.server.pool.execute(
            "UPDATE nodes SET left_at = now() WHERE name = $1 AND epoch = $2", name, epoch
        )

    async def live_nodes(self, lease_seconds: float) -> list[str]:
        """The names whose heartbeat is younger than `lease_seconds`, sorted."""
        rows = await self.server.pool.fetch(
            "SELECT name FROM nodes WHERE left_at IS NULL "
            "AND heartbeat_at > now() - make_interval(secs => $1) ORDER BY name",
            lease_seconds,
        )
        return [row["name"] for row in rows]

    async def all_nodes(self, lease_seconds: float) -> list[NodeRecord]:
        """Every node ever registered, alive or not (for status pages and tests)."""
        rows = await self.server.pool.fetch(
            "SELECT name, epoch, host, pid, started_at, heartbeat_at, (left_at IS NULL AND "
            "heartbeat_at > now() - make_interval(secs => $1)) AS alive FROM nodes ORDER BY name",
            lease_seconds,
        )
        return [NodeRecord(**dict(row)) for row in rows]
