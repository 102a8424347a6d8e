"""The seam between the dashboard and the home's shared state: what its pages read of it.

`DashboardReads` is every read the dashboard makes of the home's shared state (atlas.db by
default): the gate's log (Trust), the strangers waiting for a pairing code's approval (Home),
the names paired and pairing people gave (Conversations), the ended subagents (Workbench).
`SqliteDashboardReads` is today's SQL over atlas.db, unchanged (atlas/dashboard/queries.py,
names.py); `atlas/store/pg/dashboard.py` reads the same rows from PostgreSQL, so a page
renders the same from either.

Not here: a bot's conversations (each bot's own store, `Dashboard.open_store`), the routines
and their runs (read through RoutineStore, atlas/routines/store.py), the questions waiting
(in memory, `Dashboard.asks`). The dashboard's sessions are signed cookies: nothing stored.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from atlas.dashboard.names import people
from atlas.dashboard.queries import DecisionFilter, gate_decisions, pending_pairings

if TYPE_CHECKING:
    import sqlite_utils

    from atlas.store.home_db import HomeStore

# The columns of an ended subagent the Workbench page shows.
ENDED_SUBAGENT_SQL = (
    "SELECT id, bot, parent_conversation_id, goal, status, reason, rounds, "
    "input_tokens, output_tokens, created_at, ended_at FROM delegations "
    "WHERE status IN ('done', 'failed', 'stopped') "
    "ORDER BY created_at DESC, id"
)


@runtime_checkable
class DashboardReads(Protocol):
    async def gate_decisions(
        self, where: DecisionFilter, *, before_id: int | None, limit: int
    ) -> list[dict[str, Any]]:
        """The gate's log passing `where`, newest first, below `before_id` when given."""
        ...

    async def pending_pairings(self, now: str) -> int:
        """Strangers waiting for `atlas pairing approve` (codes pending and not expired)."""
        ...

    async def people(self, bot: str) -> dict[tuple[str, str], str]:
        """(platform, user id) -> name, of the people paired with `bot` or asking to be."""
        ...

    async def ended_subagents(self, *, offset: int, limit: int) -> list[dict[str, Any]]:
        """Subagents that ended (done, failed, stopped), newest first."""
        ...


def _ended_subagents(db: sqlite_utils.Database, offset: int, limit: int) -> list[dict[str, Any]]:
    if "delegations" not in db.table_names():
        return []
    return list(db.query(f"{ENDED_SUBAGENT_SQL} LIMIT ? OFFSET ?", [limit, offset]))


class SqliteDashboardReads:
    """The dashboard's reads of atlas.db (a HomeStore): today's SQL."""

    def __init__(self, store: HomeStore) -> None:
        self.store = store

    async def gate_decisions(
        self, where: DecisionFilter, *, before_id: int | None, limit: int
    ) -> list[dict[str, Any]]:
        return await self.store.call(
            functools.partial(gate_decisions, where=where, before_id=before_id, limit=limit)
        )

    async def pending_pairings(self, now: str) -> int:
        return await self.store.quick(functools.partial(pending_pairings, now=now))

    async def people(self, bot: str) -> dict[tuple[str, str], str]:
        return await self.store.quick(functools.partial(people, bot=bot))

    async def ended_subagents(self, *, offset: int, limit: int) -> list[dict[str, Any]]:
        return await self.store.call(
            functools.partial(_ended_subagents, offset=offset, limit=limit)
        )
