"""`atlas store migrate`, the outbox and routines part (atlas/store/pg/migrate.py copies the
conversations first and hands over the ids it moved).

- Each bot's outbox rows (its conversations.db `outbox`), one transaction per bot, new ids
  (one table holds every bot), the message each delivers moved to its new id, and the keys
  that name another row (`maybe:<id>`, `resend:<id>`) moved with it, so a note is still made
  once per row. The states are copied as they are: a start on PostgreSQL resumes the open
  ones as it would have on SQLite.
- atlas.db's routines and routine runs, one transaction, with their ids (atlas.db is one per
  home: nothing collides), the runs' conversation ids moved. A run whose slot has a run copied
  already (two fires of one slot, left by an Atlas before fires were keyed) is left out and
  counted as such: PostgreSQL keeps one run per slot.

A bot whose outbox the database holds rows of already, or a database that has routines, is
refused rather than copied twice. Files are opened read-only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from atlas.errors import AtlasError
from atlas.outbox.notes import MAYBE_KEY, RESEND_KEY
from atlas.store.pg.routines import ROUTINE_COLUMNS, RUN_COLUMNS

_OUTBOX_COLUMNS = (
    "channel",
    "chat",
    "thread",
    "user",
    "kind",
    "text",
    "files",
    "message_id",
    "key",
    "state",
    "attempts",
    "error",
    "platform_id",
    "created_at",
    "sending_at",
    "settled_at",
)


@dataclass(frozen=True)
class OutboxCopy:
    bot: str
    rows: int


@dataclass(frozen=True)
class RoutinesCopy:
    routines: int
    runs: int
    duplicate_fires: int  # runs of a slot that had one already: left out


def _read(path: Path, tables: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """The tables' rows, oldest first, read-only; a table the file does not have is empty."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        return {
            table: [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY id")]
            if table in present
            else []
            for table in tables
        }
    except sqlite3.Error as exc:
        raise AtlasError(f"{path}: cannot read it to copy: {exc}") from exc
    finally:
        conn.close()


def _moved_key(key: str | None, row_ids: dict[int, int]) -> str | None:
    """A key naming another row of the file, moved to that row's new id."""
    for prefix in (MAYBE_KEY, RESEND_KEY):
        if key is not None and key.startswith(prefix):
            old = key.removeprefix(prefix)
            if old.isdigit() and int(old) in row_ids:
                return f"{prefix}{row_ids[int(old)]}"
    return key


async def copy_bot_outbox(
    conn: asyncpg.Connection, bot: str, path: Path, message_ids: dict[int, int]
) -> OutboxCopy:
    """One bot's outbox rows in one transaction; counted back."""
    rows = _read(path, ("outbox",))["outbox"]
    async with conn.transaction():
        already = await conn.fetchval("SELECT count(*) FROM outbox WHERE bot = $1", bot)
        if already:
            raise AtlasError(
                f"the database already holds {already} outbox row(s) of bot {bot!r}; "
                "migrate copies a home into a database that has none of its bots"
            )
        new_ids = [
            record[0]
            for record in await conn.fetch(
                "SELECT nextval('outbox_id_seq') FROM generate_series(1, $1)", len(rows)
            )
        ]
        row_ids = dict(zip([row["id"] for row in rows], new_ids, strict=True))

        def value(row: dict[str, Any], name: str) -> Any:
            if name == "message_id":
                old = row["message_id"]
                return None if old is None else message_ids.get(old)
            if name == "key":
                return _moved_key(row["key"], row_ids)
            return row.get(name)

        await conn.copy_records_to_table(
            "outbox",
            columns=["id", "bot", *_OUTBOX_COLUMNS],
            records=[
                (row_ids[row["id"]], bot, *(value(row, name) for name in _OUTBOX_COLUMNS))
                for row in rows
            ],
        )
        copied = OutboxCopy(
            bot, await conn.fetchval("SELECT count(*) FROM outbox WHERE bot = $1", bot)
        )
        if copied != OutboxCopy(bot, len(rows)):
            raise AtlasError(
                f"copy of bot {bot!r}'s outbox does not add up: {copied.rows} != {len(rows)}"
            )
    return copied


async def copy_routines(
    conn: asyncpg.Connection, path: Path, conversation_ids: dict[str, dict[int, int]]
) -> RoutinesCopy:
    """atlas.db's routines and runs in one transaction; counted back."""
    rows = _read(path, ("routines", "routine_runs"))
    async with conn.transaction():
        if await conn.fetchval("SELECT count(*) FROM routines"):
            raise AtlasError(
                "the database already holds routines; migrate copies a home into a database "
                "that has none of its shared state"
            )
        await conn.copy_records_to_table(
            "routines",
            columns=["id", *ROUTINE_COLUMNS],
            records=[
                (r["id"], *(r.get(name) for name in ROUTINE_COLUMNS)) for r in rows["routines"]
            ],
        )

        def run_value(run: dict[str, Any], name: str) -> Any:
            if name == "conversation_id" and run.get(name) is not None:
                return conversation_ids.get(run["bot"] or "", {}).get(run[name])
            return run.get(name)

        await conn.execute(
            "CREATE TEMP TABLE staged_runs (LIKE routine_runs INCLUDING DEFAULTS) ON COMMIT DROP"
        )
        await conn.copy_records_to_table(
            "staged_runs",
            columns=["id", *RUN_COLUMNS],
            records=[
                (run["id"], *(run_value(run, name) for name in RUN_COLUMNS))
                for run in rows["routine_runs"]
            ],
        )
        names = ", ".join(f'"{name}"' for name in ("id", *RUN_COLUMNS))
        # Oldest first: of two fires of one slot, the first is kept.
        await conn.execute(
            f"INSERT INTO routine_runs ({names}) SELECT {names} FROM staged_runs ORDER BY id "
            "ON CONFLICT DO NOTHING"
        )
        for table in ("routines", "routine_runs"):
            await conn.execute(
                f"SELECT setval('{table}_id_seq', GREATEST((SELECT max(id) FROM {table}), 1))"
            )
        copied_routines = await conn.fetchval("SELECT count(*) FROM routines")
        copied_runs = await conn.fetchval("SELECT count(*) FROM routine_runs")
        duplicates = len(rows["routine_runs"]) - copied_runs
        # Every run left out must be a second fire of a slot whose first was copied.
        duplicate_fires = await conn.fetchval(
            "SELECT count(*) FROM staged_runs s WHERE NOT EXISTS "
            "(SELECT 1 FROM routine_runs r WHERE r.id = s.id) AND EXISTS (SELECT 1 FROM "
            "routine_runs r WHERE r.routine_id = s.routine_id AND r.scheduled_for = "
            "s.scheduled_for AND r.trigger <> 'manual')"
        )
        if copied_routines != len(rows["routines"]) or duplicates != duplicate_fires:
            raise AtlasError(
                f"copy of {path}'s routines does not add up: {copied_routines} routines and "
                f"{copied_runs} runs of {len(rows['routines'])} and {len(rows['routine_runs'])}"
            )
    return RoutinesCopy(copied_routines, copied_runs, duplicate_fires)


__all__ = ["OutboxCopy", "RoutinesCopy", "copy_bot_outbox", "copy_routines"]
