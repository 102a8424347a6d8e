"""The dashboard's reads of the home's shared state on PostgreSQL: the same rows as atlas.db's
(atlas/dashboard/reads.py `DashboardReads`), so its pages render the same from either."""

from __future__ import annotations

from typing import Any

from atlas.dashboard.queries import DecisionFilter
from atlas.dashboard.reads import ENDED_SUBAGENT_SQL
from atlas.store.pg.server import PgServer


class PgDashboardReads:
    """The dashboard's reads on a shared, open PgServer."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    async def gate_decisions(
        self, where: DecisionFilter, *, before_id: int | None, limit: int
    ) -> list[dict[str, Any]]:
        condition, params = where.sql(postgres=True)
        if before_id is not None:
            params.append(before_id)
            condition += f" AND id < ${len(params)}"
        params.append(limit)
        rows = await self.server.pool.fetch(
            f"SELECT * FROM gate_decisions WHERE {condition} ORDER BY id DESC LIMIT ${len(params)}",
            *params,
        )
        return [dict(row) for row in rows]

    async def pending_pairings(self, now: str) -> int:
        count = await self.server.pool.fetchval(
            "SELECT count(*) FROM pairing_codes WHERE status = 'pending' AND expires_at > $1", now
        )
        return int(count)

    async def people(self, bot: str) -> dict[tuple[str, str], str]:
        """As atlas/dashboard/names.py `people`: a paired name wins over an older request's."""
        names: dict[tuple[str, str], str] = {}
        async with self.server.pool.acquire() as conn:
            for query in (
                "SELECT platform, user_id, user_name FROM pairing_codes WHERE bot = $1 "
                "AND user_name != '' ORDER BY created_at",
                "SELECT platform, user_id, user_name FROM paired_users WHERE bot = $1 "
                "AND user_name != ''",
            ):
                for platform, user_id, user_name in await conn.fetch(query, bot):
                    names[(str(platform), str(user_id))] = str(user_name)
        return names

    async def ended_subagents(self, *, offset: int, limit: int) -> list[dict[str, Any]]:
        rows = await self.server.pool.fetch(
            f"{ENDED_SUBAGENT_SQL} LIMIT $1 OFFSET $2", limit, offset
        )
        return [dict(row) for row in rows]
