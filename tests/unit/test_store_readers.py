"""Searches read on connections of their own: a slow search never holds up another
conversation's append, and a search answers while the writer is busy with something long."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from atlas.providers.base import Message
from atlas.store.conversations import ConversationStore


async def test_an_append_is_not_delayed_by_a_search_under_way(tmp_path: Path) -> None:
    async with ConversationStore(tmp_path / "conversations.db") as store:
        conversation = await store.conversation("test", "chat-1", bot="atlas")
        release = threading.Event()

        def slow_read(db) -> int:  # type: ignore[no-untyped-def]
            release.wait(10)  # a search over a million messages, say
            return db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]

        reading = asyncio.create_task(store.db.read(slow_read))
        await asyncio.sleep(0.05)
        stored = await asyncio.wait_for(
            store.append(conversation.id, Message("user", "meanwhile")), 2
        )
        assert stored is not None and not reading.done()
        release.set()
        assert await reading == 1  # it saw the last commit when it began (or after)


async def test_a_search_answers_while_the_writer_is_busy(tmp_path: Path) -> None:
    async with ConversationStore(tmp_path / "conversations.db") as store:
        conversation = await store.conversation("test", "chat-1", bot="atlas")
        await store.append(conversation.id, Message("user", "the zeppelin left the pier"))
        assert [hit.message_id for hit in await store.search("zeppelin")]  # indexed now
        release = threading.Event()
        busy = asyncio.create_task(store.db.call(lambda db: release.wait(10)))
        await asyncio.sleep(0.05)
        try:
            hits = await asyncio.wait_for(store.search("zeppelin"), 2)
            assert [hit.snippet for hit in hits] and not busy.done()
        finally:
            release.set()
            await busy


async def test_a_reader_cannot_write(tmp_path: Path) -> None:
    import sqlite3

    import pytest

    async with ConversationStore(tmp_path / "conversations.db") as store:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await store.db.read(lambda db: db.execute("DELETE FROM messages"))
