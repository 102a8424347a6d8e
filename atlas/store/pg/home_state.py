"""The parts of the home's shared state (atlas.db) that live in PostgreSQL so far: the gate's
log and the delegations record, the same calls as HomeStore's (atlas/store/engine.py
`HomeStateEngine`). Routines, the outbox, pairing, the executors' records and the dashboard's
reads are beside it (routines.py, outbox.py, pairing.py, executors.py, dashboard.py)
(docs/scaling.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from atlas.errors import NotOnPostgres
from atlas.store.db import utc_now_iso
from atlas.store.home_db import GateRecord
from atlas.store.pg.server import PgServer

GATE_COLUMNS = (
    "at",
    "bot",
    "conversation_id",
    "run_kind",
    "tool",
    "arguments_digest",
    "summary",
    "verdict",
    "rule",
    "reason",
    "answered_by",
)
DELEGATION_COLUMNS = (
    "id",
    "batch",
    "bot",
    "parent_conversation_id",
    "parent_run_kind",
    "goal",
    "context",
    "status",
    "result",
    "reason",
    "spill_path",
    "conversation_id",
    "input_tokens",
    "output_tokens",
    "rounds",
    "created_at",
    "started_at",
    "ended_at",
)


def _known(columns: tuple[str, ...], names: list[str], table: str) -> None:
    """Column names are formatted into SQL: only the table's own are accepted."""
    unknown = [name for name in names if name not in columns]
    if unknown:
        raise ValueError(f"{table} has no column(s) {', '.join(unknown)}")


def _insert_sql(table: str, names: list[str]) -> str:
    marks = ", ".join(f"${i}" for i in range(1, len(names) + 1))
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})"


class PgHomeState:
    """The gate's log and the delegations on a shared, open PgServer."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    async def close(self) -> None:
        """Nothing of its own to close: the pool belongs to the server."""

    async def record_decision(self, record: GateRecord) -> None:
        row = {"at": utc_now_iso(), **record.__dict__}
        names = list(row)
        _known(GATE_COLUMNS, names, "gate_decisions")
        await self.server.pool.execute(_insert_sql("gate_decisions", names), *row.values())

    async def recent_decisions(self, limit: int = 20) -> list[dict[str, Any]]:
        rows = await self.server.pool.fetch(
            "SELECT * FROM gate_decisions ORDER BY id DESC LIMIT $1", limit
        )
        return [dict(row) for row in rows]

    async def record_delegation(self, row: dict[str, Any]) -> None:
        """A new subagent's row (see the `delegations` table)."""
        row = {"created_at": utc_now_iso(), **row}
        names = list(row)
        _known(DELEGATION_COLUMNS, names, "delegations")
        await self.server.pool.execute(_insert_sql("delegations", names), *row.values())

    async def update_delegation(self, delegation_id: str, **fields: Any) -> None:
        if not fields:
            return
        names = list(fields)
        _known(DELEGATION_COLUMNS, names, "delegations")
        sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
        await self.server.pool.execute(
            f"UPDATE delegations SET {sets} WHERE id = $1", delegation_id, *fields.values()
        )

    async def delegation(self, delegation_id: str) -> dict[str, Any] | None:
        row = await self.server.pool.fetchrow(
            "SELECT * FROM delegations WHERE id = $1", delegation_id
        )
        return dict(row) if row else None

    async def delegations(
        self, bot: str, parent_conversation_id: int, limit: int = 20
    ) -> list[dict[str, Any]]:
        """The subagents one conversation started, newest first."""
        rows = await self.server.pool.fetch(
            "SELECT * FROM delegations WHERE bot = $1 AND parent_conversation_id = $2 "
            "ORDER BY created_at DESC, id LIMIT $3",
            bot,
            parent_conversation_id,
            limit,
        )
        return [dict(row) for row in rows]


class PgHomeAudit(PgHomeState):
    """`PgHomeState` where a running home keeps atlas.db's HomeStore (the runtime's `audit`):
    atlas.db's own SQL (`call`, `quick`), not on PostgreSQL yet, refuses with `NotOnPostgres`
    naming what asked for it, rather than opening the SQLite file."""

    @property
    def path(self) -> str:
        return self.server.where

    async def call(self, fn: Callable[..., Any]) -> NoReturn:
        raise NotOnPostgres(f"atlas.db's SQL ({getattr(fn, '__qualname__', fn)})", self.path)

    async def quick(self, fn: Callable[..., Any]) -> NoReturn:
        raise NotOnPostgres(f"atlas.db's SQL ({getattr(fn, '__qualname__', fn)})", self.path)
