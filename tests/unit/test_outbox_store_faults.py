"""The outbox while the store cannot write (a full disk, issue 34): a row that went out while
its `delivered` could not be written is marked once the store writes again, never sent twice,
and the rows queued behind it go out after it (the worker used to die, leaving them stalled
until the next message to the address). SQLite refuses the writes for real, through an
authorizer on the store's writer connection, as in tests/unit/test_lane_faults.py."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from atlas.outbox import sender
from atlas.outbox.rows import add_row
from atlas.store.conversations import ConversationStore
from tests.unit.test_outbox import HERE, FakeAdapter, opened, outbox_over, states

WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}


async def refuse_writes(store: ConversationStore, refuse: bool) -> None:
    def deny(action: int, *_: object) -> int:
        return sqlite3.SQLITE_DENY if action in WRITES else sqlite3.SQLITE_OK

    await store.db.quick(lambda db: db.conn.set_authorizer(deny if refuse else None))


async def test_a_sent_row_is_marked_once_the_store_writes_and_the_queue_goes_on(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sender, "STORE_RETRY_FIRST", 0.02, raising=False)
    adapter = FakeAdapter()
    adapter.hold = asyncio.Event()
    path = tmp_path / "conversations.db"
    async with opened(path) as store:
        outbox = outbox_over(store, adapter)
        first = await outbox.enqueue(HERE, "first answer", kind="answer")
        await asyncio.wait_for(adapter.entered.wait(), 5)  # marked sending, now on the wire
        second = await outbox.enqueue(HERE, "second answer", kind="answer")  # queued behind
        await refuse_writes(store, True)  # the disk fills while the first is sent
        adapter.hold.set()
        await asyncio.sleep(0.3)  # its `delivered` is refused, tried again meanwhile
        assert adapter.texts() == ["first answer"]
        await refuse_writes(store, False)  # the disk is freed
        delivered = await asyncio.wait_for(outbox.wait(HERE, second), 5)
        assert delivered.state == "delivered"
        assert (await outbox.wait(HERE, first)).state == "delivered"
        assert adapter.texts() == ["first answer", "second answer"]  # once each, in order
        assert [state for _, state, _ in states(path)] == ["delivered", "delivered"]


async def test_a_row_the_store_cannot_mark_sending_waits_and_goes_once_it_can(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sender, "STORE_RETRY_FIRST", 0.02, raising=False)
    adapter = FakeAdapter()
    path = tmp_path / "conversations.db"
    async with opened(path) as store:
        outbox = outbox_over(store, adapter)
        # Written with its answer before the disk filled; its turn to go comes after.
        row = await store.db.quick(lambda db: add_row(db, HERE, "answer", "after the fill", ()))
        await refuse_writes(store, True)
        outbox.queue([row])
        await asyncio.sleep(0.3)
        assert adapter.texts() == []  # not sent while it cannot be marked `sending`
        await refuse_writes(store, False)
        assert (await asyncio.wait_for(outbox.wait(HERE, row.id), 5)).state == "delivered"
        assert adapter.texts() == ["after the fill"]
