"""`atlas store migrate`: atlas.db's pairing, the coding executors' records and the chats' `/new`
generations, copied into
PostgreSQL (beside atlas/store/pg/migrate.py, which copies the conversations, the gate's log and
the delegations, and calls this).

Copied in one transaction, read-only on atlas.db, then counted table by table:
- `pairing_codes` and `paired_users`, as they are (no ids: codes and people are their keys);
- `executor_tasks`, their conversation id moved to its bot's new numbering;
- `executor_turns` and `executor_entries` with their own ids kept (an entry points at its turn;
  the database holds none of them before, so nothing collides) and the sequences moved past
  them; a turn's `conversation` ("bot:id") moved likewise; each entry's search words computed;
- `chat_generations`, as they are (a chat's key is its channel, chat, thread and user).
A conversation id the bot's file no longer has becomes NULL for a task and `bot:0` for a turn
(no conversation has id 0, and the turn stays its bot's), rather than pointing at another's.
A database that already holds any of these rows is refused, not copied into twice.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from atlas.errors import AtlasError
from atlas.store.pg.executors import TASK_COLUMNS, TURN_COLUMNS, entry_words
from atlas.store.pg.pairing import CODE_COLUMNS, PAIRED_COLUMNS
from atlas.store.pg.text import words_vector

ENTRY_COLUMNS = ("id", "turn_id", "kind", "who", "text", "at")
GENERATION_COLUMNS = ("channel", "chat", "thread", "user", "generation")
TABLES: dict[str, tuple[str, ...]] = {
    "pairing_codes": CODE_COLUMNS,
    "paired_users": PAIRED_COLUMNS,
    "executor_tasks": TASK_COLUMNS,
    "executor_turns": ("id", *TURN_COLUMNS),
    "executor_entries": ENTRY_COLUMNS,
    "chat_generations": GENERATION_COLUMNS,
}


@dataclass(frozen=True)
class SharedCopy:
    """What was copied of atlas.db's pairing and executors' records (checked against it)."""

    pairing_codes: int
    paired_users: int
    executor_tasks: int
    executor_turns: int
    executor_entries: int
    chat_generations: int

    def describe(self) -> str:
        return (
            f"{self.pairing_codes} pairing codes, {self.paired_users} paired users, "
            f"{self.executor_tasks} executor tasks, {self.executor_turns} executor turns "
            f"({self.executor_entries} entries), {self.chat_generations} /new generations"
        )


def _read(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The tables' rows, read-only, in the order they were written; a table an older home does
    not have yet is empty."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        return {
            table: [
                dict(row)
                for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid")
            ]
            if table in present
            else []
            for table, columns in TABLES.items()
        }
    except sqlite3.Error as exc:
        raise AtlasError(f"{path}: cannot read it to copy: {exc}") from exc
    finally:
        conn.close()


def _moved_conversation(value: str | None, ids: dict[str, dict[int, int]]) -> str | None:
    """A turn's "bot:conversation id" in the new numbering."""
    if not value or ":" not in value:
        return value
    bot, _, number = value.rpartition(":")
    if not number.isdigit():
        return value
    return f"{bot}:{ids.get(bot, {}).get(int(number), 0)}"


async def copy_shared_records(
    conn: asyncpg.Connection, path: Path, conversation_ids: dict[str, dict[int, int]]
) -> SharedCopy:
    """Copy atlas.db's pairing, executors' records and `/new` generations in one transaction,
    then count them."""
    rows = _read(path)

    def moved(row: dict[str, Any], table: str, name: str) -> Any:
        if table == "executor_tasks" and name == "conversation_id" and row[name] is not None:
            return conversation_ids.get(row.get("bot") or "", {}).get(row[name])
        if table == "executor_turns" and name == "conversation":
            return _moved_conversation(row[name], conversation_ids)
        return row[name]

    async with conn.transaction():
        for table in TABLES:
            if await conn.fetchval(f"SELECT count(*) FROM {table}"):
                raise AtlasError(
                    f"the database already holds rows in {table}; migrate copies a home into "
                    "a database that has none of its shared state"
                )
        for table, columns in TABLES.items():
            if table == "executor_entries":
                continue  # below: each with its search column
            await conn.copy_records_to_table(
                table,
                columns=list(columns),
                records=[tuple(moved(row, table, name) for name in columns) for row in rows[table]],
            )
        # An entry's `words` are computed on the way in (atlas/store/pg/text.py): a home's
        # record holds thousands of entries, not the millions of messages that need COPY.
        await conn.executemany(
            f"INSERT INTO executor_entries ({', '.join(ENTRY_COLUMNS)}, words) "
            f"VALUES ($1, $2, $3, $4, $5, $6, {words_vector('$7')})",
            [
                (*(row[name] for name in ENTRY_COLUMNS), entry_words(row["text"], row["who"]))
                for row in rows["executor_entries"]
            ],
        )
        for table in ("executor_turns", "executor_entries"):  # new rows number after these
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"COALESCE(MAX(id), 0) + 1, false) FROM {table}"
            )
        counts = [await conn.fetchval(f"SELECT count(*) FROM {table}") for table in TABLES]
        copied = SharedCopy(*counts)
        expected = SharedCopy(*(len(rows[table]) for table in TABLES))
        if copied != expected:
            raise AtlasError(f"copy of {path} does not add up: {copied} != {expected}")
    return copied
