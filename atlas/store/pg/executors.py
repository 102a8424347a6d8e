"""The coding executors' records on PostgreSQL: the executor tasks as rows and the delegation
record's turns and entries, the same rows and calls as atlas.db's
(atlas/executors/record_rows.py `RecordRows`).

The record's search (delegation_search) reads each entry's `words`, filled on insert as the
messages' are (atlas/store/pg/text.py): the same words found as atlas.db's FTS5 index finds;
the order of equally good matches and the snippets' cuts can differ (ts_rank and ts_headline
where SQLite has bm25 and snippet).
"""

from __future__ import annotations

import re
from typing import Any

from atlas.executors.record_rows import CUT_BY_STOP, LIVE_STATES, turn_end
from atlas.executors.record_search import InstanceSummary, RecordFilter
from atlas.executors.workbench import INTERRUPTED
from atlas.store.db import utc_now_iso
from atlas.store.pg.server import PgServer
from atlas.store.pg.text import WORDS_CONFIG, words_terms, words_text, words_tsquery, words_vector
from atlas.store.search import fts_query

TASK_COLUMNS = (
    "id",
    "bot",
    "conversation_id",
    "run_kind",
    "executor",
    "account",
    "folder",
    "goal",
    "title",
    "route",
    "session_id",
    "state",
    "detail",
    "last_event",
    "result_summary",
    "started_at",
    "ended_at",
    "updated_at",
    "reported_at",
)
TURN_COLUMNS = (
    "instance_id",
    "executor",
    "account",
    "folder",
    "conversation",
    "owner",
    "session_id",
    "prompt",
    "final_text",
    "files_before",
    "files_after",
    "usage",
    "state",
    "started_at",
    "ended_at",
)


# Snippets marked as the conversations' are (atlas/store/pg/conversations.py).
HEADLINE_OPTIONS = "StartSel=**, StopSel=**, MaxWords=16, MinWords=6, ShortWord=1"
# An entry as atlas.db's rows give it (not its `words`).
ENTRY_SELECT = "e.id, e.turn_id, e.kind, e.who, e.text, e.at"
INSERT_ENTRY = (
    "INSERT INTO executor_entries (turn_id, kind, who, text, at, words) "
    f"VALUES ($1, $2, $3, $4, $5, {words_vector('$6')})"
)


def _known(columns: tuple[str, ...], names: list[str], table: str) -> None:
    """Column names are formatted into SQL: only the table's own are accepted."""
    unknown = [name for name in names if name not in columns]
    if unknown:
        raise ValueError(f"{table} has no column(s) {', '.join(unknown)}")


def _marks(count: int, start: int = 1) -> str:
    return ", ".join(f"${i}" for i in range(start, start + count))


class PgRecordRows:
    """The executors' records on a shared, open PgServer."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    # ---- executor_tasks ---------------------------------------------------------------------

    async def save_task(self, row: dict[str, Any]) -> None:
        """Insert the task's row, or replace the columns given (as sqlite-utils' upsert)."""
        names = list(row)
        _known(TASK_COLUMNS, names, "executor_tasks")
        if "id" not in row:
            raise ValueError("an executor task's row needs its id")
        updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in names if name != "id")
        await self.server.pool.execute(
            f"INSERT INTO executor_tasks ({', '.join(names)}) VALUES ({_marks(len(names))}) "
            f"ON CONFLICT (id) DO {'UPDATE SET ' + updates if updates else 'NOTHING'}",
            *row.values(),
        )

    async def task(self, task_id: str) -> dict[str, Any] | None:
        row = await self.server.pool.fetchrow("SELECT * FROM executor_tasks WHERE id = $1", task_id)
        return dict(row) if row else None

    async def latest_tasks(self, limit: int) -> list[dict[str, Any]]:
        rows = await self.server.pool.fetch(
            "SELECT * FROM executor_tasks ORDER BY started_at DESC, id LIMIT $1", limit
        )
        return [dict(row) for row in rows]

    async def interrupt_live_tasks(self, now: str) -> list[str]:
        async with self.server.pool.acquire() as conn, conn.transaction():
            ids = [
                row["id"]
                for row in await conn.fetch(
                    "UPDATE executor_tasks SET state = $1, detail = $2, ended_at = $3, "
                    "updated_at = $3, reported_at = NULL WHERE state = ANY($4::text[]) "
                    "RETURNING id",
                    INTERRUPTED,
                    f"interrupted: {CUT_BY_STOP}",
                    now,
                    list(LIVE_STATES),
                )
            ]
            if ids:
                await conn.execute(
                    "UPDATE executor_turns SET state = $1, ended_at = $2 "
                    "WHERE state = 'running' AND instance_id = ANY($3::text[])",
                    INTERRUPTED,
                    now,
                    ids,
                )
        return sorted(ids)

    async def unreported_tasks(self) -> list[dict[str, Any]]:
        rows = await self.server.pool.fetch(
            "SELECT * FROM executor_tasks WHERE state = $1 AND reported_at IS NULL "
            "ORDER BY started_at",
            INTERRUPTED,
        )
        return [dict(row) for row in rows]

    async def mark_task_reported(self, task_id: str, now: str) -> None:
        await self.server.pool.execute(
            "UPDATE executor_tasks SET reported_at = $1 WHERE id = $2", now, task_id
        )

    # ---- executor_turns and executor_entries ------------------------------------------------

    async def start_turn(self, row: dict[str, Any]) -> int:
        names = list(row)
        _known(TURN_COLUMNS, names, "executor_turns")
        async with self.server.pool.acquire() as conn, conn.transaction():
            if not row.get("session_id"):
                last = await conn.fetchval(
                    "SELECT session_id FROM executor_turns WHERE instance_id = $1 "
                    "AND session_id IS NOT NULL ORDER BY id DESC LIMIT 1",
                    row["instance_id"],
                )
                row = {**row, "session_id": last}
            turn = int(
                await conn.fetchval(
                    f"INSERT INTO executor_turns ({', '.join(names)}) "
                    f"VALUES ({_marks(len(names))}) RETURNING id",
                    *(row[name] for name in names),
                )
            )
            await self._entry(conn, turn, "prompt", row["prompt"], None)
        return turn

    async def set_turn_session(self, turn_id: int, session_id: str) -> None:
        await self.server.pool.execute(
            "UPDATE executor_turns SET session_id = $1 WHERE id = $2", session_id, turn_id
        )

    async def add_entry(self, turn_id: int, kind: str, text: str, who: str | None) -> None:
        await self._entry(self.server.pool, turn_id, kind, text, who)

    async def finish_turn(
        self,
        turn_id: int,
        final_text: str,
        files_changed: str,
        usage: dict[str, Any] | None,
        state: str,
        session_id: str | None,
    ) -> None:
        async with self.server.pool.acquire() as conn, conn.transaction():
            turn = await conn.fetchrow(
                "SELECT * FROM executor_turns WHERE id = $1 FOR UPDATE", turn_id
            )
            if turn is None:
                raise LookupError(f"no executor turn {turn_id}")
            told = await conn.fetchval(
                "SELECT 1 FROM executor_entries WHERE turn_id = $1 "
                "AND kind IN ('final', 'error') AND text = $2",
                turn_id,
                final_text,
            )
            changes, entries = turn_end(
                dict(turn), final_text, files_changed, usage, state, session_id, told is not None
            )
            names = list(changes)
            sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
            await conn.execute(
                f"UPDATE executor_turns SET {sets} WHERE id = $1", turn_id, *changes.values()
            )
            for kind, text in entries:
                await self._entry(conn, turn_id, kind, text, None)

    async def instance_turns(self, instance_id: str) -> list[dict[str, Any]]:
        async with self.server.pool.acquire() as conn:
            turns = [
                dict(row)
                for row in await conn.fetch(
                    "SELECT * FROM executor_turns WHERE instance_id = $1 ORDER BY id", instance_id
                )
            ]
            entries = await conn.fetch(
                f"SELECT {ENTRY_SELECT} FROM executor_entries AS e "
                "WHERE e.turn_id = ANY($1::bigint[]) ORDER BY e.id",
                [turn["id"] for turn in turns],
            )
        for turn in turns:
            turn["entries"] = [dict(e) for e in entries if e["turn_id"] == turn["id"]]
        return turns

    @staticmethod
    async def _entry(conn: Any, turn_id: int, kind: str, text: str, who: str | None) -> None:
        await conn.execute(
            INSERT_ENTRY, turn_id, kind, who, text, utc_now_iso(), entry_words(text, who)
        )

    # ---- reading back (delegation_search) ---------------------------------------------------

    async def latest_instances(
        self, where: RecordFilter, *, limit: int, oldest: bool = False
    ) -> list[InstanceSummary]:
        condition, params = _where(where)
        order = "first_at, instance_id" if oldest else "last_at DESC, instance_id"
        rows = await self.server.pool.fetch(
            "SELECT t.instance_id, COUNT(*) AS turns, MIN(t.started_at) AS first_at, "
            "MAX(COALESCE(t.ended_at, t.started_at)) AS last_at FROM executor_turns AS t "
            f"WHERE {condition} GROUP BY t.instance_id ORDER BY {order} "
            f"LIMIT {int(limit)}",
            *params,
        )
        return [InstanceSummary(**dict(row)) for row in rows]

    async def match_instances(
        self, text: str, where: RecordFilter, *, limit: int
    ) -> list[InstanceSummary]:
        """As atlas.db's: every word required, the instances with the best sum of their
        matching entries' scores first (here -ts_rank, lower is better, as bm25's)."""
        terms = _terms(text)
        if not terms:
            return []
        condition, params = _where(where)
        tsquery, values = words_tsquery(terms, len(params) + 1)
        params.extend(values)
        rows = await self.server.pool.fetch(
            "SELECT t.instance_id, COUNT(DISTINCT t.id) AS turns, MIN(t.started_at) AS first_at, "
            "MAX(COALESCE(t.ended_at, t.started_at)) AS last_at, "
            "SUM(-ts_rank(e.words, q))::float8 AS score, COUNT(*) AS hits "
            "FROM executor_entries AS e JOIN executor_turns AS t ON t.id = e.turn_id, "
            f"(SELECT {tsquery}) AS found(q) WHERE e.words @@ q AND {condition} "
            f"GROUP BY t.instance_id ORDER BY score, last_at DESC LIMIT {int(limit)}",
            *params,
        )
        return [InstanceSummary(**dict(row)) for row in rows]

    async def matching_entries(
        self, text: str, instance_id: str, *, limit: int
    ) -> list[dict[str, Any]]:
        """An instance's entries matching the words, best first, each with a marked snippet."""
        terms = _terms(text)
        if not terms:
            return []
        tsquery, values = words_tsquery(terms, 2)
        rows = await self.server.pool.fetch(
            f"SELECT {ENTRY_SELECT}, t.id AS turn, "
            f"ts_headline('{WORDS_CONFIG}', e.text, q, '{HEADLINE_OPTIONS}') AS snippet "
            "FROM executor_entries AS e JOIN executor_turns AS t ON t.id = e.turn_id, "
            f"(SELECT {tsquery}) AS found(q) WHERE e.words @@ q AND t.instance_id = $1 "
            f"ORDER BY ts_rank(e.words, q) DESC, e.id LIMIT {int(limit)}",
            instance_id,
            *values,
        )
        return [dict(row) for row in rows]


def entry_words(text: str, who: str | None) -> str:
    """An entry's searchable words (its text and who), split as FTS5's unicode61 splits them."""
    return words_text(f"{text} {who or ''}")


def _terms(text: str) -> list[str]:
    """The person's words as atlas.db's `fts_query` keeps them: none when nothing is left."""
    return words_terms(text) if fts_query(text) is not None else []


_NAMED = re.compile(r":(\w+)")
_LIKE = re.compile(r"\bLIKE\b")


def _where(where: RecordFilter) -> tuple[str, list[Any]]:
    """The filter's conditions (atlas.db's, written with :names) for PostgreSQL: numbered
    parameters, and ILIKE for SQLite's LIKE, which ignores the case of ASCII letters."""
    named: dict[str, Any] = {}
    conditions = " AND ".join(where.sql(named))
    values: list[Any] = []

    def number(match: re.Match[str]) -> str:
        values.append(named[match[1]])
        return f"${len(values)}"

    sql = _LIKE.sub("ILIKE", _NAMED.sub(number, conditions))
    return ("TRUE" if sql == "1" else sql), values
