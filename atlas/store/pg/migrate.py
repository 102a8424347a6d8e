"""`atlas store migrate --to postgresql://…`: copy a home's conversations into PostgreSQL.

Each bot's `conversations.db` is read (read-only: the file is never changed) and copied in one
transaction per bot: its conversations, messages and compactions, with new ids (one database
holds every bot, so a file's ids would collide) and the ids that point at messages
(`answers_upto`, a compaction's `first_kept_id`) moved with them. Rows go through COPY into a
staging table and on with one INSERT that fills the search column, not an INSERT each: a
million messages took about three minutes here, half of it the trigram index
(docs/benchmarks.md). The counts are then compared bot by bot.

Of the home's shared state (atlas.db), the gate's log and the delegations are copied, their
conversation ids moved to the new numbering; then pairing and the coding executors' records
and the chats' `/new` generations (atlas/store/pg/migrate_shared.py); then each bot's outbox rows
and atlas.db's routines and runs (atlas/store/pg/migrate_outbox.py). A bot that already has
conversations in the database is refused, not copied twice, and so is a database that already
has any of these shared rows. The dashboard's sessions are signed cookies, nothing stored to
copy.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg

from atlas.errors import AtlasError
from atlas.store.pg.home_state import DELEGATION_COLUMNS, GATE_COLUMNS
from atlas.store.pg.migrate_outbox import (
    OutboxCopy,
    RoutinesCopy,
    copy_bot_outbox,
    copy_routines,
)
from atlas.store.pg.migrate_shared import SharedCopy, copy_shared_records
from atlas.store.pg.server import PgServer
from atlas.store.pg.text import words_text, words_vector

_MESSAGE_COLUMNS = (
    "id, conversation_id, role, content, tool_calls, tool_call_id, name, images, usage, "
    "model, event_id, kind, answers_upto, delivered_at, sending_at, created_at"
)


@dataclass(frozen=True)
class BotCopy:
    """What was copied of one bot, and what its file holds (equal when verified)."""

    bot: str
    conversations: int
    messages: int
    compactions: int


@dataclass(frozen=True)
class HomeCopy:
    """What was copied of atlas.db (checked against what it holds)."""

    gate_decisions: int
    delegations: int
    # pairing and the executors' records (atlas/store/pg/migrate_shared.py), copied after
    records: SharedCopy | None = None


def _read_file(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every conversation, message and compaction of a bot's file, oldest first. Opened
    read-only (mode=ro): a home being copied is left exactly as it was."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return {
            table: [dict(row) for row in conn.execute(sql)]
            for table, sql in (
                ("conversations", "SELECT * FROM conversations ORDER BY id"),
                ("messages", f"SELECT {_MESSAGE_COLUMNS} FROM messages ORDER BY id"),
                ("compactions", "SELECT * FROM compactions ORDER BY id"),
            )
        }
    except sqlite3.Error as exc:
        raise AtlasError(f"{path}: cannot read it to copy: {exc}") from exc
    finally:
        conn.close()


async def _new_ids(conn: asyncpg.Connection, table: str, count: int) -> list[int]:
    if not count:
        return []
    rows = await conn.fetch(f"SELECT nextval('{table}_id_seq') FROM generate_series(1, $1)", count)
    return [row[0] for row in rows]


async def copy_bot(
    conn: asyncpg.Connection, bot: str, path: Path, message_ids_out: dict[int, int] | None = None
) -> tuple[BotCopy, dict[int, int]]:
    """Copy one bot's file in one transaction; the counts read back from the database, and
    its conversations' new ids by their old ones (its messages' in `message_ids_out`)."""
    rows = _read_file(path)
    async with conn.transaction():
        already = await conn.fetchval("SELECT count(*) FROM conversations WHERE bot = $1", bot)
        if already:
            raise AtlasError(
                f"the database already holds {already} conversation(s) of bot {bot!r}; "
                "migrate copies a home into a database that has none of its bots"
            )
        conversation_ids = dict(
            zip(
                [row["id"] for row in rows["conversations"]],
                await _new_ids(conn, "conversations", len(rows["conversations"])),
                strict=True,
            )
        )
        message_ids = dict(
            zip(
                [row["id"] for row in rows["messages"]],
                await _new_ids(conn, "messages", len(rows["messages"])),
                strict=True,
            )
        )
        await conn.copy_records_to_table(
            "conversations",
            columns=[
                "id",
                "bot",
                "channel",
                "chat",
                "thread",
                "user",
                "kind",
                "title",
                "created_at",
                "updated_at",
            ],
            records=[
                (
                    conversation_ids[r["id"]],
                    bot,
                    r["channel"],
                    r["chat"],
                    r["thread"],
                    r["user"],
                    r["kind"],
                    r["title"],
                    r["created_at"],
                    r["updated_at"],
                )
                for r in rows["conversations"]
            ],
        )
        await _copy_messages(conn, bot, rows["messages"], conversation_ids, message_ids)
        if message_ids_out is not None:
            message_ids_out.update(message_ids)
        await conn.copy_records_to_table(
            "compactions",
            columns=["conversation_id", "first_kept_id", "summary", "created_at"],
            records=[
                (
                    conversation_ids[r["conversation_id"]],
                    _moved(message_ids, r["first_kept_id"]),
                    r["summary"],
                    r["created_at"],
                )
                for r in rows["compactions"]
            ],
        )
        copied = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM conversations WHERE bot = $1) AS conversations, "
            "(SELECT count(*) FROM messages WHERE bot = $1) AS messages, "
            "(SELECT count(*) FROM compactions k JOIN conversations c "
            "ON c.id = k.conversation_id WHERE c.bot = $1) AS compactions",
            bot,
        )
        expected = BotCopy(
            bot, len(rows["conversations"]), len(rows["messages"]), len(rows["compactions"])
        )
        result = BotCopy(bot, copied["conversations"], copied["messages"], copied["compactions"])
        if result != expected:  # rolled back with the transaction: nothing half copied
            raise AtlasError(f"copy of bot {bot!r} does not add up: {result} != {expected}")
    return result, conversation_ids


def _moved(message_ids: dict[int, int], old: int | None) -> int | None:
    """A message id in its new numbering; an id that points past the file's rows (a deleted
    message) is kept as the nearest id after it, so "from this message on" still holds."""
    if old is None:
        return None
    if old in message_ids:
        return message_ids[old]
    later = [new for previous, new in message_ids.items() if previous > old]
    return min(later) if later else max(message_ids.values(), default=0) + 1


async def _copy_messages(
    conn: asyncpg.Connection,
    bot: str,
    messages: list[dict[str, Any]],
    conversation_ids: dict[int, int],
    message_ids: dict[int, int],
) -> None:
    await conn.execute(
        "CREATE TEMP TABLE staged_messages (LIKE messages INCLUDING DEFAULTS) ON COMMIT DROP"
    )
    await conn.execute("ALTER TABLE staged_messages DROP COLUMN words, ADD COLUMN words_text TEXT")
    columns = [name.strip() for name in _MESSAGE_COLUMNS.split(",")]
    move: dict[str, Callable[[Any], Any]] = {
        "id": message_ids.__getitem__,
        "conversation_id": conversation_ids.__getitem__,
        "answers_upto": lambda old: _moved(message_ids, old),
    }
    await conn.copy_records_to_table(
        "staged_messages",
        columns=["bot", *columns, "words_text"],
        records=[
            (
                bot,
                *(move[name](row[name]) if name in move else row[name] for name in columns),
                words_text(row["content"] or ""),
            )
            for row in messages
        ],
    )
    names = ", ".join(columns)
    await conn.execute(
        f"INSERT INTO messages (bot, {names}, words) SELECT bot, {names}, "
        f"{words_vector('words_text')} FROM staged_messages"
    )


def _read_home_file(path: Path) -> dict[str, list[dict[str, Any]]]:
    """atlas.db's gate log and delegations, read-only; a table it does not have yet is empty."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        return {
            table: [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
            if table in present
            else []
            for table in ("gate_decisions", "delegations")
        }
    except sqlite3.Error as exc:
        raise AtlasError(f"{path}: cannot read it to copy: {exc}") from exc
    finally:
        conn.close()


async def copy_home_state(
    conn: asyncpg.Connection, path: Path, conversation_ids: dict[str, dict[int, int]]
) -> HomeCopy:
    """Copy atlas.db's gate log and delegations in one transaction, conversation ids moved
    (an id the bot's file no longer has becomes NULL rather than pointing at another's)."""
    rows = _read_home_file(path)

    def moved(row: dict[str, Any], column: str) -> int | None:
        old = row.get(column)
        return None if old is None else conversation_ids.get(row.get("bot") or "", {}).get(old)

    async with conn.transaction():
        for table in ("gate_decisions", "delegations"):
            if await conn.fetchval(f"SELECT count(*) FROM {table}"):
                raise AtlasError(
                    f"the database already holds rows in {table}; migrate copies a home into "
                    "a database that has none of its shared state"
                )
        for table, columns, ids in (
            ("gate_decisions", GATE_COLUMNS, ("conversation_id",)),
            ("delegations", DELEGATION_COLUMNS, ("parent_conversation_id", "conversation_id")),
        ):
            await conn.copy_records_to_table(
                table,
                columns=list(columns),
                records=[
                    tuple(moved(row, name) if name in ids else row.get(name) for name in columns)
                    for row in rows[table]
                ],
            )
        copied = HomeCopy(
            await conn.fetchval("SELECT count(*) FROM gate_decisions"),
            await conn.fetchval("SELECT count(*) FROM delegations"),
        )
        expected = HomeCopy(len(rows["gate_decisions"]), len(rows["delegations"]))
        if copied != expected:
            raise AtlasError(f"copy of {path} does not add up: {copied} != {expected}")
    return copied


@dataclass
class MigrateReport:
    """Everything one migrate copied, part by part, each counted."""

    bots: list[BotCopy]
    shared: HomeCopy | None
    outboxes: list[OutboxCopy]
    routines: RoutinesCopy | None


async def migrate_home(home: Any, url: str, password: str | None) -> MigrateReport:
    """Copy every bot's conversations of `home` (an atlas.home.Home), then the shared state
    that has tables there so far, then the outboxes and routines, to the database at `url`."""
    copies = []
    outboxes = []
    conversation_ids: dict[str, dict[int, int]] = {}
    message_ids: dict[str, dict[int, int]] = {}
    copying = PgServer(url, password, idle_in_transaction=None)  # rows built between statements
    async with copying as server, server.pool.acquire() as conn:
        for name, bot in sorted(home.bots.items()):
            if not bot.db_path.exists():
                continue  # a bot that never talked has no file, and nothing to copy
            message_ids[name] = {}
            copy, conversation_ids[name] = await copy_bot(
                conn, name, bot.db_path, message_ids[name]
            )
            copies.append(copy)
        shared = routines = None
        if home.db_path.exists():
            shared = await copy_home_state(conn, home.db_path, conversation_ids)
            records = await copy_shared_records(conn, home.db_path, conversation_ids)
            shared = replace(shared, records=records)
        for name, bot in sorted(home.bots.items()):
            if name in message_ids:
                outboxes.append(await copy_bot_outbox(conn, name, bot.db_path, message_ids[name]))
        if home.db_path.exists():
            routines = await copy_routines(conn, home.db_path, conversation_ids)
    return MigrateReport(copies, shared, outboxes, routines)
