"""A failed turn told to people in a chat: a short neutral note, not the provider's error (which
names the model server's host:port and gives config advice). The detail goes to the log, and
to the operator's own terminal (`atlas chat`, tests/integration/test_chat_piped.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from atlas.channels.manager import start_channels, stop_channels
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.runtime import Runtime
from atlas.turn_failure import PEOPLE_NOTE
from tests.fakes.model_servers import FakeOpenAIServer
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.helpers import make_home

OWNER = 1


async def test_a_telegram_user_gets_a_neutral_note_and_the_log_the_detail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeTelegram()
    base = await fake.start()
    monkeypatch.setenv("ATLAS_TEST_TELEGRAM_TOKEN", TOKEN)
    async with FakeOpenAIServer() as server:
        server.fail(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}})
        root = tmp_path / "home"
        make_home(root, base_url=server.base_url)
        bot_toml = root / "bots" / "atlas" / "bot.toml"
        bot_toml.write_text(
            bot_toml.read_text()
            + f'\n[channels.telegram]\ntoken_env = "ATLAS_TEST_TELEGRAM_TOKEN"\n'
            f'api_base = "{base}"\nallowed_users = [{OWNER}]\npoll_timeout = 5\n'
        )
        runtime = Runtime(Home(root))
        dispatcher = Dispatcher(runtime, {})
        channels = await start_channels(runtime.home, dispatcher, wait=5)
        try:
            with caplog.at_level(logging.WARNING, logger="atlas.dispatch"):
                await fake.push(fake.message("hello?", user_id=OWNER))
                await fake.wait_for(lambda: len(fake.sent_texts(OWNER)) >= 1)
        finally:
            await dispatcher.shutdown()
            await stop_channels(channels)
            await runtime.close()
            await fake.stop()
    [told] = fake.sent_texts(OWNER)
    assert told == PEOPLE_NOTE
    port = server.base_url.rsplit(":", 1)[1].split("/")[0]
    assert port not in told and "config.toml" not in told
    logged = "\n".join(r.getMessage() for r in caplog.records if "turn failed" in r.getMessage())
    assert "HTTP 401" in logged and "config.toml" in logged, logged  # the detail, for the operator
