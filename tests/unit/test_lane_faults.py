"""A lane never dies: a store that cannot write under a running turn fails that turn (and the
note telling the person so), and the same chat answers the next message once it can again."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.fakes.recording_channel import RecordingChannel

ADDRESS = Address("atlas", "test", "chat-1", user="u1")
WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}


async def refuse_writes(runtime: Runtime, home, refuse: bool) -> None:  # type: ignore[no-untyped-def]
    """SQLite itself refuses every write on the store's connection (as a full disk does: a
    real sqlite3 error from the writer, not a stand-in for our code), or stops refusing."""
    store = await runtime.store(home.bot(None))

    def deny(action: int, *_: object) -> int:
        return sqlite3.SQLITE_DENY if action in WRITES else sqlite3.SQLITE_OK

    await store.db.quick(lambda db: db.conn.set_authorizer(deny if refuse else None))


async def test_a_store_that_cannot_write_under_a_running_turn_does_not_end_the_lane(
    home,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    release = asyncio.Event()
    model = ScriptedModel(Reply("lost answer", wait_for=release), Reply("back again"))
    runtime = Runtime(home, model=model, registry=ToolRegistry())
    channel = RecordingChannel()
    dispatcher = Dispatcher(runtime, {"test": channel})
    try:
        await dispatcher.submit(Inbound(ADDRESS, "write me a lot"))
        for _ in range(200):
            if model.requests:
                break
            await asyncio.sleep(0.01)
        await refuse_writes(runtime, home, refuse=True)
        with caplog.at_level(logging.ERROR):
            release.set()
            await asyncio.wait_for(dispatcher.wait_idle(ADDRESS), 10)
        assert "not authorized" in caplog.text  # the fault is logged with SQLite's reason
        assert channel.sent == []  # neither the answer nor the note could be stored
        await refuse_writes(runtime, home, refuse=False)
        assert await dispatcher.submit(Inbound(ADDRESS, "are you still there?"))
        await asyncio.wait_for(dispatcher.wait_idle(ADDRESS), 10)
        assert channel.sent == [(ADDRESS, "back again")]
        model.assert_complete()
    finally:
        await dispatcher.shutdown()
        await runtime.close()
