"""Routines and their runs in the home's PostgreSQL database (schema step 11), the same calls
as `RoutineStore` on atlas.db (atlas/routines/engine.py `RoutineEngine`).

A scheduled fire runs once across the home: `routine_runs_fire` is a unique index on
(routine, scheduled time) for every run but a manual one, so of two schedulers (two nodes, or
an old one still running) starting the same slot, the second's INSERT finds the first's row
and is told `AlreadyFired`; likewise a missed slot is recorded once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from atlas.routines.store import (
    AlreadyFired,
    Routine,
    RoutineError,
    RoutineRun,
    RunResult,
    RunTrigger,
    Target,
    _routine,
    _run,
    changed_columns,
    finished_columns,
    fire_key,
    missed_row,
    name_taken,
    new_routine_row,
    start_row,
)
from atlas.store.db import utc_now_iso
from atlas.store.pg.server import PgServer

ROUTINE_COLUMNS = (
    "bot",
    "name",
    "prompt",
    "schedule",
    "channel",
    "chat",
    "thread",
    "user",
    "paused",
    "grace_seconds",
    "source",
    "source_digest",
    "armed_at",
    "created_at",
    "updated_at",
    "precheck",
)
RUN_COLUMNS = (
    "routine_id",
    "bot",
    "name",
    "trigger",
    "scheduled_for",
    "started_at",
    "ended_at",
    "status",
    "input_tokens",
    "output_tokens",
    "delivery",
    "conversation_id",
    "error",
    "text",
    "owed",
)


def _names(columns: tuple[str, ...], row: dict[str, Any], table: str) -> list[str]:
    """The row's column names, quoted; only the table's own (they are formatted into SQL)."""
    unknown = [name for name in row if name not in columns]
    if unknown:
        raise RoutineError(f"{table} has no column(s) {', '.join(unknown)}")
    return [f'"{name}"' for name in row]


def _insert_sql(table: str, columns: tuple[str, ...], row: dict[str, Any]) -> str:
    names = _names(columns, row, table)
    marks = ", ".join(f"${i}" for i in range(1, len(names) + 1))
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks}) RETURNING id"


class PgRoutineStore:
    """Routines and their runs on a shared, open PgServer."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    async def _select(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        return [dict(row) for row in await self.server.pool.fetch(sql, *args)]

    async def create(
        self,
        bot: str,
        name: str,
        prompt: str,
        schedule: str,
        target: Target | None,
        *,
        paused: bool = False,
        grace_seconds: int | None = None,
        source: str = "tool",
        source_digest: str = "",
        armed_at: str | None = None,
        precheck: str = "",
    ) -> Routine:
        row = new_routine_row(
            bot,
            name,
            prompt,
            schedule,
            target,
            paused=paused,
            grace_seconds=grace_seconds,
            source=source,
            source_digest=source_digest,
            armed_at=armed_at,
            precheck=precheck,
        )
        try:
            routine_id = await self.server.pool.fetchval(
                _insert_sql("routines", ROUTINE_COLUMNS, row), *row.values()
            )
        except asyncpg.UniqueViolationError:
            raise name_taken(bot, name) from None
        found = await self.get(routine_id)
        assert found is not None  # just inserted
        return found

    async def get(self, routine_id: int) -> Routine | None:
        rows = await self._select("SELECT * FROM routines WHERE id = $1", routine_id)
        return _routine(rows[0]) if rows else None

    async def find(self, bot: str | None, key: str) -> Routine | None:
        where, params = "name = $1", [key]
        if key.strip().isdigit():
            where, params = "(id = $1 OR name = $2)", [int(key), key]
        if bot is not None:
            params.append(bot)
            where += f" AND bot = ${len(params)}"
        rows = await self._select(f"SELECT * FROM routines WHERE {where} ORDER BY id", *params)
        if len(rows) > 1:
            bots = ", ".join(sorted(r["bot"] for r in rows))
            raise RoutineError(f"{key!r} names routines of several bots ({bots}); give --bot")
        return _routine(rows[0]) if rows else None

    async def all(self, bot: str | None = None) -> list[Routine]:
        if bot is None:
            rows = await self._select("SELECT * FROM routines ORDER BY bot, name")
        else:
            rows = await self._select("SELECT * FROM routines WHERE bot = $1 ORDER BY name", bot)
        return [_routine(r) for r in rows]

    async def update(
        self, routine_id: int, *, armed_at: str | None = None, **changes: Any
    ) -> Routine:
        """As `RoutineStore.update`: a new schedule or a resume re-arms the routine."""
        current = await self.get(routine_id)
        if current is None:
            raise RoutineError(f"there is no routine {routine_id}")
        changed_columns(current, changes, armed_at)
        names = _names(ROUTINE_COLUMNS, changes, "routines")
        sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
        try:
            await self.server.pool.execute(
                f"UPDATE routines SET {sets} WHERE id = $1", routine_id, *changes.values()
            )
        except asyncpg.UniqueViolationError:
            raise RoutineError(
                f"another routine of this bot is already named {changes.get('name')!r}"
            ) from None
        found = await self.get(routine_id)
        if found is None:
            raise RoutineError(f"there is no routine {routine_id}")
        return found

    async def remove(self, routine_id: int) -> bool:
        status = await self.server.pool.execute("DELETE FROM routines WHERE id = $1", routine_id)
        return status != "DELETE 0"

    async def start_run(
        self, routine: Routine, trigger: RunTrigger, scheduled_for: datetime | None
    ) -> int:
        """A new run's id; `AlreadyFired` when its slot has a run already (any process's)."""
        row = start_row(routine, trigger, scheduled_for)
        return await self._insert_fire(routine, row, fire_key(trigger, scheduled_for))

    async def _insert_fire(self, routine: Routine, row: dict[str, Any], key: str | None) -> int:
        try:
            return int(
                await self.server.pool.fetchval(
                    _insert_sql("routine_runs", RUN_COLUMNS, row), *row.values()
                )
            )
        except asyncpg.UniqueViolationError:  # routine_runs_fire: the slot has its row
            raise AlreadyFired(routine.name, key or "") from None

    async def finish_run(self, run_id: int, result: RunResult) -> None:
        columns = finished_columns(result)
        names = _names(RUN_COLUMNS, columns, "routine_runs")
        sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
        await self.server.pool.execute(
            f"UPDATE routine_runs SET {sets} WHERE id = $1", run_id, *columns.values()
        )

    async def record_missed(self, routine: Routine, scheduled_for: datetime, why: str) -> int:
        row = missed_row(routine, scheduled_for, why)
        return await self._insert_fire(routine, row, scheduled_for.isoformat())

    async def runs(self, routine_id: int, limit: int = 20) -> list[RoutineRun]:
        rows = await self._select(
            "SELECT * FROM routine_runs WHERE routine_id = $1 ORDER BY id DESC LIMIT $2",
            routine_id,
            limit,
        )
        return [_run(r) for r in rows]

    async def get_run(self, run_id: int) -> RoutineRun | None:
        rows = await self._select("SELECT * FROM routine_runs WHERE id = $1", run_id)
        return _run(rows[0]) if rows else None

    async def running(self, routine_id: int) -> RoutineRun | None:
        rows = await self._select(
            "SELECT * FROM routine_runs WHERE routine_id = $1 AND status = 'running' "
            "ORDER BY id DESC LIMIT 1",
            routine_id,
        )
        return _run(rows[0]) if rows else None

    async def close_interrupted_runs(self, why: str) -> list[RoutineRun]:
        """As `RoutineStore.close_interrupted_runs` (on a home of several nodes, only the
        scheduler's lease holder may call it: another node's runs may be going)."""
        async with self.server.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "UPDATE routine_runs SET status = 'failed', ended_at = $1, error = $2 "
                "WHERE status = 'running'",
                utc_now_iso(),
                why,
            )
            rows = await conn.fetch(
                "SELECT * FROM routine_runs WHERE status = 'failed' AND error = $1 "
                "AND COALESCE(delivery, '') = '' ORDER BY id",
                why,
            )
        return [_run(dict(row)) for row in rows]

    async def record_delivery(self, run_id: int, delivery: str) -> None:
        await self.server.pool.execute(
            "UPDATE routine_runs SET delivery = $2, owed = NULL WHERE id = $1", run_id, delivery
        )

    async def owed_reports(self, since: datetime) -> list[tuple[int, int, str]]:
        rows = await self._select(
            "SELECT id, routine_id, owed FROM routine_runs WHERE owed IS NOT NULL "
            "AND started_at >= $1 ORDER BY id",
            since.astimezone(UTC).isoformat(timespec="microseconds"),
        )
        return [(row["id"], row["routine_id"], row["owed"]) for row in rows]

    async def signature(self) -> str:
        rows = await self._select(
            "SELECT COUNT(*) AS n, COALESCE(MAX(updated_at), '') AS at, "
            "COALESCE(SUM(id), 0) AS ids FROM routines"
        )
        return f"{rows[0]['n']}/{rows[0]['at']}/{rows[0]['ids']}"


__all__ = ["PgRoutineStore"]
