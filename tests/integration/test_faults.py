"""Faults on the wire, end to end: the real dispatcher, tool loop, model router and OpenAI SDK
against the self-answering fake model; the real aiogram and slack-bolt channels against the
fake Telegram and Slack. Each fault must still end in exactly one answer."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.channels.manager import start_channels, stop_channels
from atlas.channels.telegram import inbound as telegram_inbound
from atlas.dispatch import Dispatcher, Inbound
from atlas.home import Home
from atlas.runtime import Runtime
from tests.fakes.load_fakes import (
    TAG,
    TOOL_FILE,
    TOOL_MARK,
    AutoOpenAIServer,
    FaultMix,
    TimedTelegram,
)
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.slack_server import FakeSlack
from tests.helpers import make_home

ADDRESS = Address("atlas", "fake", "chat-1")
CONFIG = """\
main = "atlas"
timezone = "UTC"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "{base_url}"
timeout = 0.5
max_retries = 2

[limits]
retry_base_delay = 0.01
retry_max_delay = 2.0

[review]
enabled = false
"""


@dataclass
class Stack:
    model: AutoOpenAIServer
    home: Home
    runtime: Runtime
    dispatcher: Dispatcher
    channel: RecordingChannel

    async def turn(self, text: str) -> list[str]:
        """Send one message and wait for the turn to end; what the channel was sent."""
        before = len(self.channel.sent)
        assert await self.dispatcher.submit(Inbound(ADDRESS, text, event_id=f"e-{text}"))
        await self.dispatcher.wait_idle(ADDRESS)
        return [sent for _, sent in self.channel.sent[before:]]


def faulty_home(root: Path, base_url: str) -> Home:
    home = make_home(root, config=CONFIG.format(base_url=base_url))
    workspace = home.bot(None).workspace
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / TOOL_FILE).write_text("a small file\n")
    return home


@pytest.fixture
async def stack(home_path: Path) -> AsyncIterator[Stack]:
    async with AutoOpenAIServer() as model:
        model.keep_requests = True
        home = faulty_home(home_path, model.base_url)
        runtime = Runtime(home)
        channel = RecordingChannel("fake")
        dispatcher = Dispatcher(runtime, {"fake": channel})
        yield Stack(model, home, runtime, dispatcher, channel)
        await dispatcher.shutdown()
        await runtime.close()


# ------------------------------------------------------------------ the model server


async def test_a_429_waits_its_retry_after_then_answers(stack: Stack) -> None:
    stack.model.fail(429, headers={"Retry-After": "0.3"})
    started = time.monotonic()
    assert await stack.turn("T0-1-0 hello") == ["Answer to T0-1-0."]
    assert time.monotonic() - started >= 0.3
    assert stack.model.handled == 2


async def test_a_500_is_retried(stack: Stack) -> None:
    stack.model.fail(500)
    stack.model.fail(503)
    assert await stack.turn("T0-1-0 hello") == ["Answer to T0-1-0."]
    assert stack.model.handled == 3


async def test_a_call_that_times_out_is_retried(stack: Stack) -> None:
    stack.model.hang(5)  # past the provider's 0.5 s timeout
    started = time.monotonic()
    assert await stack.turn("T0-1-0 hello") == ["Answer to T0-1-0."]
    assert 0.5 <= time.monotonic() - started < 4
    assert stack.model.handled == 2


async def test_retries_exhausted_tell_the_person_and_keep_the_lane(stack: Stack) -> None:
    for _ in range(3):  # the first try and both retries
        stack.model.fail(500)
    [sent] = await stack.turn("T0-1-0 hello")
    assert sent.startswith("Sorry, I could not answer:") and "HTTP 500" in sent
    assert await stack.turn("T0-1-1 again") == ["Answer to T0-1-1."]


async def test_malformed_tool_arguments_go_back_to_the_model_and_the_turn_goes_on(
    stack: Stack,
) -> None:
    stack.model.random_faults = FaultMix(1.0, only=frozenset({"bad_json"}))
    assert await stack.turn(f"T0-1-0 {TOOL_MARK}") == ["Read it. T0-1-0 done."]
    tool_messages = [m for m in stack.model.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0]["content"].startswith("Error:")
    assert "not valid JSON" in tool_messages[0]["content"]


async def test_a_read_file_tool_turn_works_without_faults(stack: Stack) -> None:
    assert await stack.turn(f"T0-1-0 {TOOL_MARK}") == ["Read it. T0-1-0 done."]
    tool_messages = [m for m in stack.model.requests[-1]["messages"] if m["role"] == "tool"]
    assert "a small file" in tool_messages[0]["content"]


async def test_a_context_length_error_compacts_then_retries_once(stack: Stack) -> None:
    stack.model.overflow()  # OpenAI's 400 with code context_length_exceeded
    sent = await stack.turn("T0-1-0 hello")
    assert sent[-1] == "Answer to T0-1-0."
    assert stack.model.handled == 2  # not retried as a transient failure: compacted, then once
    assert any("context limit" in note for note in sent[:-1])


async def test_a_second_context_length_error_is_reported_not_looped(stack: Stack) -> None:
    stack.model.overflow()
    stack.model.overflow()
    [sent] = await stack.turn("T0-1-0 hello")
    assert sent.startswith("Sorry, I could not answer:")
    assert stack.model.handled == 2


# ------------------------------------------------------------------ Telegram


@pytest.fixture
async def telegram(
    home_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[TimedTelegram, AutoOpenAIServer]]:
    async with AutoOpenAIServer() as model:
        fake = TimedTelegram()
        await fake.start()
        home = faulty_home(home_path, model.base_url)
        bot_toml = home.bot(None).root / "bot.toml"
        bot_toml.write_text(
            bot_toml.read_text()
            + f'\n[channels.telegram]\napi_base = "{fake.base_url}"\nallowed_users = [1]\n'
            + "poll_timeout = 1\n"
        )
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake.token)
        # A failed poll is retried after 1 s, doubling: the same path, sooner.
        monkeypatch.setattr(telegram_inbound, "POLL_RETRY_FIRST", 0.05)
        home = Home(home.root)
        runtime = Runtime(home)
        dispatcher = Dispatcher(runtime, {})
        running = await start_channels(home, dispatcher)
        await fake.wait_for(lambda: fake.polls > 0)
        yield fake, model
        await stop_channels(running)
        await dispatcher.shutdown()
        await runtime.close()
        await fake.stop()


async def test_telegram_429_5xx_and_a_proxys_502_page_deliver_exactly_once(
    telegram: tuple[TimedTelegram, AutoOpenAIServer],
) -> None:
    # (A dropped connection on sendMessage is not retried, as the send may have arrived:
    # tests/integration/test_telegram_faults.py.)
    fake, _ = telegram
    fake.fail_next("sendMessage", "html502")  # nginx never reached the API: sent again
    fake.fail_next("sendMessage", "429", retry_after=1)
    fake.fail_next("sendMessage", "500")
    reply = fake.expect("T0-1-0")
    started = time.monotonic()
    await fake.push(fake.message("T0-1-0 hello", user_id=1))
    await fake.wait_for(lambda: reply.done(), timeout=10)
    assert time.monotonic() - started >= 1.0  # retry_after honoured
    assert [s.text for s in fake.sent] == ["Answer to T0-1-0."]


async def test_telegram_polling_survives_5xx_and_a_dropped_connection(
    telegram: tuple[TimedTelegram, AutoOpenAIServer],
) -> None:
    fake, _ = telegram
    fake.fail_next("getUpdates", "500")
    fake.fail_next("getUpdates", "drop")
    fake.fail_next("getUpdates", "html502")
    await fake.wait_for(lambda: not fake.faults, timeout=10)  # both met: the poller went on
    polls = fake.polls
    reply = fake.expect("T0-1-0")
    await fake.push(fake.message("T0-1-0 hello", user_id=1))
    await fake.wait_for(lambda: reply.done(), timeout=10)
    assert fake.polls > polls
    assert [s.text for s in fake.sent] == ["Answer to T0-1-0."]


async def test_random_outages_on_model_and_telegram_cost_time_never_a_message(
    telegram: tuple[TimedTelegram, AutoOpenAIServer], home_path: Path
) -> None:
    """What the crash test and the soak do with --faults, in small: each kind of fault at
    random on both fakes, and every turn still ends in exactly one answer, or in the person
    being told it failed (retries run out), with each message stored once."""
    fake, model = telegram
    model.random_faults = FaultMix(0.3, seed=7, retry_after=0)
    model.hang_seconds = 1.0  # past the provider's 0.5 s timeout
    fake.random_faults = FaultMix(0.15, seed=8)  # Telegram never asks for 0 s
    tags = [f"T0-1-{n}" for n in range(8)]
    for n, tag in enumerate(tags):
        reply = fake.expect(tag)
        await fake.push(fake.message(f"{tag} please {TOOL_MARK if n % 2 else 'go'}", user_id=1))
        await fake.wait_for(reply.done, timeout=30)
    texts = [s.text for s in fake.sent if not s.text.startswith("(")]  # notes: context limit
    for tag in tags:
        answers = [text for text in texts if tag in text]
        assert len(answers) == (0 if tag in fake.told_failed else 1), (tag, texts)
    assert len(texts) == len(tags), texts  # nothing else, nothing twice
    db = home_path / "bots" / "atlas" / "conversations.db"
    with sqlite3.connect(db) as conn:
        stored = [r[0] for r in conn.execute("SELECT content FROM messages WHERE role = 'user'")]
    assert sorted(TAG.findall(" ".join(stored))) == sorted(tags)
    assert sum(model.random_faults.injected.values()) >= 3, model.random_faults.injected
    assert sum(fake.random_faults.injected.values()) >= 2, fake.random_faults.injected


# ------------------------------------------------------------------ Slack


async def test_slack_429_5xx_and_a_dropped_connection_deliver_exactly_once(
    home_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AutoOpenAIServer() as model:
        fake = FakeSlack()
        await fake.start()
        home = faulty_home(home_path, model.base_url)
        bot_toml = home.bot(None).root / "bot.toml"
        bot_toml.write_text(
            bot_toml.read_text()
            + f'\n[channels.slack]\nallowed_users = ["UALICE"]\napi_base = "{fake.api_url}"\n'
        )
        monkeypatch.setenv("SLACK_BOT_TOKEN", fake.bot_token)
        monkeypatch.setenv("SLACK_APP_TOKEN", fake.app_token)
        home = Home(home.root)
        runtime = Runtime(home)
        dispatcher = Dispatcher(runtime, {})
        running = await start_channels(home, dispatcher)
        try:
            await fake.wait_connected()
            fake.fail("chat.postMessage", "drop_before")
            fake.fail("chat.postMessage", "429", retry_after=1)
            fake.fail("chat.postMessage", "500")
            ts = fake.next_ts()
            event = {
                "type": "message",
                "channel": "D0001",
                "channel_type": "im",
                "user": "UALICE",
                "text": "T0-1-0 hello",
                "ts": ts,
                "event_ts": ts,
                "client_msg_id": "m-1",
            }
            await fake.push_event(event)
            await fake.wait_for(lambda: bool(fake.posted), timeout=10)
            await fake.wait_for(lambda: not fake._failures.get("chat.postMessage"), timeout=5)
            assert [p.text for p in fake.posted] == ["Answer to T0-1-0."]
        finally:
            await stop_channels(running)
            await dispatcher.shutdown()
            await runtime.close()
            await fake.close()
