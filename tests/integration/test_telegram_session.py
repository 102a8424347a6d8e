"""Bots on one Telegram API server share one aiogram session (real aiogram, the fake Bot API
on 127.0.0.1): each bot is still served on its own, and the session lives until the last bot
stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.channels.manager import start_channels, stop_channels
from atlas.channels.telegram.channel import TelegramChannel
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from atlas.trust.gate import OpenGate
from tests.fakes.telegram_server import FakeTelegram, SharedBotAPI
from tests.helpers import make_home

OWNER = 1
TOKENS = {"atlas": "111111:FIRST-token", "helper": "222222:SECOND-token"}

CHANNEL = """
[channels.telegram]
token_env = "ATLAS_TEST_TOKEN_{upper}"
api_base = "{base}"
allowed_users = [{owner}]
poll_timeout = 5
"""


async def test_two_bots_share_one_session_until_the_last_one_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = {name: FakeTelegram(token=token) for name, token in TOKENS.items()}
    api = SharedBotAPI(list(fakes.values()))
    base = await api.start()
    root = tmp_path / "home"
    make_home(root)
    helper = root / "bots" / "helper"
    for sub in ("memory", "skills", "workspace"):
        (helper / sub).mkdir(parents=True)
    (helper / "bot.toml").write_text('title = "Helper"\nmode = "auto"\n')
    (helper / "MISSION.md").write_text("Help.\n")
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"ATLAS_TEST_TOKEN_{name.upper()}", token)
        toml = root / "bots" / name / "bot.toml"
        toml.write_text(
            toml.read_text() + CHANNEL.format(upper=name.upper(), base=base, owner=OWNER)
        )
    model = ScriptedModel()
    runtime = Runtime(Home(root), model=model, gate=OpenGate(), registry=ToolRegistry([]))
    dispatcher = Dispatcher(runtime, {})
    channels = await start_channels(Home(root), dispatcher, wait=5)
    try:
        first = channels["telegram:atlas"]
        second = channels["telegram:helper"]
        assert isinstance(first, TelegramChannel) and isinstance(second, TelegramChannel)
        assert first.tg is not None and second.tg is not None
        session = first.tg.session
        assert second.tg.session is session

        model.add(Reply("from atlas"), Reply("from helper"))
        await fakes["atlas"].push(fakes["atlas"].message("hello", user_id=OWNER))
        await fakes["atlas"].wait_for(lambda: fakes["atlas"].sent_texts(OWNER) == ["from atlas"])
        await fakes["helper"].push(fakes["helper"].message("hello", user_id=OWNER))
        await fakes["helper"].wait_for(lambda: fakes["helper"].sent_texts(OWNER) == ["from helper"])

        await first.stop()  # one bot gone: the other goes on with the same session
        model.add(Reply("still here"))
        await fakes["helper"].push(fakes["helper"].message("again", user_id=OWNER))
        await fakes["helper"].wait_for(
            lambda: fakes["helper"].sent_texts(OWNER) == ["from helper", "still here"]
        )
        assert second.tg.session is session
        client = session._session  # aiogram's aiohttp ClientSession
        assert client is not None and not client.closed

        await second.stop()
        assert client.closed, "the last bot to stop closes the shared session"
        model.assert_complete()
    finally:
        await dispatcher.shutdown()
        await stop_channels(channels)
        await runtime.close()
        await api.stop()


async def test_a_session_closes_its_connections_over_plain_http_and_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closing skips aiogram's TLS wait only for a plain-HTTP server; either way the pool of
    connections is closed (a leak would show as an unclosed aiohttp session)."""
    import asyncio

    from atlas.channels.telegram.session import release_session, shared_session

    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(delay: float, *args: object) -> object:
        waits.append(delay)
        return await real_sleep(0, *args)

    for base, tls_wait in (("http://127.0.0.1:9", []), ("https://127.0.0.1:9", [0.25])):
        session = shared_session(base)
        client = await session.create_session()
        monkeypatch.setattr(asyncio, "sleep", recorded_sleep)
        await release_session(session)
        monkeypatch.setattr(asyncio, "sleep", real_sleep)
        assert client.closed, base
        assert waits == tls_wait, base
        waits.clear()
