"""Terminal turns left unfinished (a failed `atlas chat` turn) are settled once, quietly, at
the next start: no warning at every `atlas run`, no message sent anywhere."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.outbox.rows import Outgoing
from atlas.providers.base import Message
from atlas.providers.scripted import ScriptedModel
from atlas.recovery import CONSOLE_UNANSWERED, resume_interrupted_turns
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.fakes.recording_channel import RecordingChannel

TELEGRAM = "telegram:atlas"


async def test_console_turns_are_settled_once_without_a_warning(
    home: Home, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    telegram = RecordingChannel(TELEGRAM)
    dispatcher = Dispatcher(runtime, {TELEGRAM: telegram})  # as `atlas run`: no console
    store = await runtime.store(home.bot(None))
    failed = await store.conversation("console", "terminal-1", bot="atlas")
    for text in ("hello", "second"):  # two turns that failed: no answer stored
        await store.append(failed.id, Message("user", text))
    printed = await store.conversation("console", "terminal-2", bot="atlas")
    asked = await store.append(printed.id, Message("user", "q"))
    # Its outbox row never marked (the chat died as it printed): the terminal's, left alone.
    row = Outgoing(Address("atlas", "console", "terminal-2"), "a")
    await store.append(printed.id, Message("assistant", "a"), answers_upto=asked, also=row)

    later = datetime.now(UTC) + timedelta(hours=1)
    caplog.set_level(logging.WARNING, logger="atlas.recovery")
    first = await resume_interrupted_turns(dispatcher, started_at=later, now=later)
    assert first.skipped == [] and first.outbox.queued == first.outbox.maybe == []
    assert len(first.settled_console) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    history = [(m.role, m.content) for m in await store.history(failed.id)]
    assert history[-1] == ("assistant", CONSOLE_UNANSWERED)
    assert telegram.sent == []

    second = await resume_interrupted_turns(dispatcher, started_at=later, now=later)
    assert second.settled_console == [] and second.skipped == []  # once
    await runtime.close()


async def test_a_recent_console_turn_is_left_to_its_chat_quietly(
    home: Home, caplog: pytest.LogCaptureFixture
) -> None:
    """An `atlas chat` may still be running it: no note, and no warning either."""
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {TELEGRAM: RecordingChannel(TELEGRAM)})
    store = await runtime.store(home.bot(None))
    live = await store.conversation("console", "terminal-3", bot="atlas")
    await store.append(live.id, Message("user", "thinking..."))
    caplog.set_level(logging.WARNING, logger="atlas.recovery")
    soon = datetime.now(UTC) + timedelta(seconds=5)
    report = await resume_interrupted_turns(dispatcher, started_at=soon, now=soon)
    assert report.skipped == [] and report.settled_console == []
    assert not caplog.records
    assert [m.role for m in await store.history(live.id)] == ["user"]
    await runtime.close()
