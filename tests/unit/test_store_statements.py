"""The SQL one turn costs: every statement a plain turn's store work runs (a person's message
stored, its history read, one answer stored with its outbox row, the row sent and delivered),
listed by sqlite3's trace callback on a real store. A statement added to the hot path (a schema
lookup, a SELECT whose answer is known, a BEGIN around a lone UPDATE, a trigger that opens the
full-text indexes on every insert) fails here; take it out, or change the list on purpose."""

from __future__ import annotations

import asyncio
import pickle
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from atlas.channels.base import Address
from atlas.outbox.rows import Outgoing
from atlas.outbox.sender import Outbox
from atlas.providers.base import Message, Usage
from atlas.store.conversations import ConversationStore
from atlas.store.db import utc_now_iso
from atlas.store.home_db import GateRecord, HomeStore

HERE = Address("atlas", "fake", "42")

# What one turn runs, in order: four commits (each of them needed by itself, see
# atlas/outbox/rows.py) and one read; nothing else.
ONE_TURN = [
    # the person's message; its conversation's updated_at moves by trigger (migration 012)
    "INSERT INTO messages",
    # the history the model is sent: the compaction and the newer rows (the rest is cached)
    "SELECT compactions",
    "SELECT messages",
    # the answer and the row that delivers it: one transaction
    "BEGIN IMMEDIATE",
    "INSERT INTO messages",
    "INSERT INTO outbox",
    "COMMIT",
    # handed to the platform, then delivered: each one statement that commits itself
    "UPDATE outbox",
    "UPDATE outbox",
]


def _statements(traced: list[str]) -> list[str]:
    """What was run, from what the trace callback saw: Python reports each trigger program a
    statement runs as that statement again (its expanded SQL), so a repeat in a row is one."""
    return [sql for n, sql in enumerate(traced) if n == 0 or sql != traced[n - 1]]


class Adapter:
    name = "fake"

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> str:
        return "p1"


def _shape(sql: str) -> str:
    """A statement as its verb and table: `INSERT INTO messages`, `SELECT compactions`."""
    words = sql.split()
    verb = words[0].upper()
    if verb in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA"):
        return " ".join(words[:2]) if verb == "BEGIN" else verb
    if verb == "SELECT":
        found = re.search(r"\bFROM\s+(\w+)", sql, re.IGNORECASE)
        return f"SELECT {found.group(1) if found else '?'}"
    if verb == "INSERT":
        return f"INSERT INTO {words[2].strip(chr(34))}"
    return f"{verb} {words[1]}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    async with ConversationStore(tmp_path / "conversations.db") as opened:
        yield opened


async def _turn(store: ConversationStore, outbox: Outbox, conversation_id: int, n: int) -> None:
    await store.append(conversation_id, Message("user", f"question {n}"), event_id=f"u{n}")
    await store.history_and_compaction(conversation_id)
    outgoing = Outgoing(HERE, f"answer {n}")
    await store.append(
        conversation_id,
        Message("assistant", f"answer {n}"),
        usage=Usage(10, 5),
        model="m",
        answers_upto=1,
        also=outgoing,
    )
    await outbox.deliver(outgoing.rows)


async def test_one_turn_runs_nine_statements_and_writes_twelve_pages(
    store: ConversationStore,
) -> None:
    async def database(bot: str) -> object:
        return store.db

    outbox = Outbox({"fake": Adapter()}, database)  # type: ignore[arg-type]
    conversation_id = (await store.conversation("fake", "42", bot="atlas")).id
    await _turn(store, outbox, conversation_id, 1)  # the first read of a history is whole
    wal = store.path.with_name(store.path.name + "-wal")
    wal_before = wal.stat().st_size
    seen: list[str] = []
    connection = store.db._connection().conn
    connection.set_trace_callback(seen.append)
    try:
        await _turn(store, outbox, conversation_id, 2)
    finally:
        connection.set_trace_callback(None)
        await outbox.shutdown()
    # Statements run inside SQLite (an FTS5 table's own) are traced too, prefixed "--".
    assert [_shape(sql) for sql in _statements(seen)] == ONE_TURN, "\n".join(seen)
    assert not connection.in_transaction
    # What the commits cost is mostly the pages they write to the WAL (no checkpoint runs in
    # between, so it only grows): the message, its conversation's index and, for the
    # person's, its event id's two (per conversation, and across them: migration 013); the
    # conversation; the outbox row and its open-rows index (not when it turns `sending`:
    # migration 011).
    page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    frames = (wal.stat().st_size - wal_before) / (page_size + 24)  # 24: each frame's header
    assert frames == 5 + 5 + 1 + 2


async def test_a_gate_decision_is_one_statement(tmp_path: Path) -> None:
    home = HomeStore(tmp_path / "atlas.db")
    record = GateRecord("atlas", 1, "conversation", "shell", "ab12", "ls", "allow", "r", "", "")
    await home.record_decision(record)  # opens the file
    seen: list[str] = []
    connection = home.db._connection().conn
    connection.set_trace_callback(seen.append)
    try:
        await home.record_decision(record)
    finally:
        connection.set_trace_callback(None)
    assert [_shape(sql) for sql in _statements(seen)] == ["INSERT INTO gate_decisions"], seen
    assert len(await home.recent_decisions()) == 2
    await home.close()


class Held(Adapter):
    """A channel whose send never returns: the row stays `sending`."""

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> str:
        await asyncio.Event().wait()
        return "never"


async def test_a_keyed_row_is_one_statement_and_leaves_no_transaction_open(
    store: ConversationStore,
) -> None:
    async def database(bot: str) -> object:
        return store.db

    outbox = Outbox({"fake": Held()}, database)  # type: ignore[arg-type]
    seen: list[str] = []
    connection = store.db._connection().conn
    connection.set_trace_callback(seen.append)
    try:
        first = await outbox.enqueue(HERE, "a report", kind="report", key="run-1")
        again = await outbox.enqueue(HERE, "a report", kind="report", key="run-1")
    finally:
        connection.set_trace_callback(None)
        await outbox.shutdown()
    assert again == first
    shapes = [_shape(sql) for sql in _statements(seen)]
    assert shapes.count("UPDATE outbox") == 1, seen  # its worker marks it sending, then waits
    assert [shape for shape in shapes if shape != "UPDATE outbox"] == [
        "INSERT INTO outbox",  # made, and returned (RETURNING): no BEGIN, no SELECT after
        "INSERT INTO outbox",  # the key is taken: nothing made ...
        "SELECT outbox",  # ... so the row is read as it is now
    ], seen
    assert not connection.in_transaction  # the INSERT ... RETURNING committed by itself


def test_utc_now_iso_is_datetimes_own_form() -> None:
    before = datetime.now(UTC).isoformat(timespec="microseconds")
    stamp = utc_now_iso()
    after = datetime.now(UTC).isoformat(timespec="microseconds")
    assert before <= stamp <= after
    assert datetime.fromisoformat(stamp).isoformat(timespec="microseconds") == stamp


async def test_a_gate_decisions_write_crosses_processes_by_name(tmp_path: Path) -> None:
    """A worker sends atlas.db work to the home's process pickled; a gate decision's is a
    module function with its row (plain pickle can take it: no closure pickled by value)."""
    sent: list[Any] = []

    class Recording(HomeStore):
        async def quick(self, fn: Any) -> Any:
            sent.append(fn)
            return await super().quick(pickle.loads(pickle.dumps(fn)))

    home = Recording(tmp_path / "atlas.db")
    record = GateRecord("atlas", 1, "conversation", "shell", "ab12", "ls", "allow", "r", "", "")
    await home.record_decision(record)
    assert len(sent) == 1
    [row] = await home.recent_decisions()
    assert (row["bot"], row["tool"], row["verdict"]) == ("atlas", "shell", "allow")
    await home.close()
