"""Telegram in webhook mode: real aiogram and the channel's own aiohttp listener on 127.0.0.1,
with updates POSTed as Telegram would, and the fake Bot API recording setWebhook."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from atlas.channels.telegram.channel import create_channel
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.providers.scripted import Reply
from tests.helpers import make_home
from tests.integration.test_telegram import OWNER, Harness, _harness

SECRET = "s3cret_token-for-tests"
WEBHOOK_URL = "https://bot.example.com/telegram/atlas"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    port = _free_port()
    extra = f"""mode = "webhook"
webhook_url = "{WEBHOOK_URL}"
webhook_secret_env = "ATLAS_TEST_TELEGRAM_SECRET"
webhook_listen = "127.0.0.1"
webhook_port = {port}
"""
    env = {"ATLAS_TEST_TELEGRAM_SECRET": SECRET}
    async with _harness(tmp_path, monkeypatch, extra=extra, env=env) as harness:
        harness.listener = f"http://127.0.0.1:{port}/telegram/atlas"  # type: ignore[attr-defined]
        yield harness


async def _post(hook: Harness, update: dict[str, Any], secret: str | None) -> int:
    headers = {SECRET_HEADER: secret} if secret is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(hook.listener, json=update, headers=headers) as response,  # type: ignore[attr-defined]
    ):
        return response.status


def _update(hook: Harness, text: str, update_id: int) -> dict[str, Any]:
    return {"update_id": update_id, **hook.fake.message(text, user_id=OWNER)}


async def test_set_webhook_is_called_with_the_secret(hook: Harness) -> None:
    [call] = hook.fake.calls_to("setWebhook")
    assert call["url"] == WEBHOOK_URL
    assert call["secret_token"] == SECRET
    assert set(call["allowed_updates"]) == {"message", "callback_query"}
    assert not hook.fake.calls_to("getUpdates"), "webhook mode does not poll"
    assert not hook.fake.calls_to("deleteWebhook")


async def test_an_update_with_the_secret_is_a_turn_and_a_reply(hook: Harness) -> None:
    hook.model.add(Reply("hello via **webhook**"))
    assert await _post(hook, _update(hook, "hi there", 501), SECRET) == 200
    # Stored before Telegram hears 200, so a crash after the answer loses nothing.
    store = await hook.runtime.store(hook.home.bot("atlas"))
    conversation = await store.conversation("telegram:atlas", str(OWNER), bot="atlas")
    assert [m.content for m in await store.history(conversation.id)][0] == "hi there"
    assert await hook.replies(OWNER, 1) == ["hello via <b>webhook</b>"]
    assert hook.model.requests[0].messages[-1].content == "hi there"


@pytest.mark.parametrize("secret", [None, "", "wrong-secret", SECRET + "x"])
async def test_a_missing_or_wrong_secret_is_refused_without_a_turn(
    hook: Harness, secret: str | None
) -> None:
    assert await _post(hook, _update(hook, "let me in", 601), secret) in (401, 403)
    # The same update id with the right secret is not taken for a duplicate: the refused
    # one was never seen.
    hook.model.add(Reply("only the real one"))
    assert await _post(hook, _update(hook, "the real one", 601), SECRET) == 200
    assert await hook.replies(OWNER, 1) == ["only the real one"]
    assert [r.messages[-1].content for r in hook.model.requests] == ["the real one"]


async def test_a_body_that_is_not_an_update_is_refused(hook: Harness) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            hook.listener,  # type: ignore[attr-defined]
            data=b"not json",
            headers={SECRET_HEADER: SECRET, "Content-Type": "application/json"},
        ) as response,
    ):
        assert response.status == 400
    assert hook.model.requests == []


async def test_a_duplicate_update_is_dropped(hook: Harness) -> None:
    hook.model.add(Reply("once"), Reply("next"))
    update = _update(hook, "hello", 701)
    assert await _post(hook, update, SECRET) == 200
    await hook.replies(OWNER, 1)
    # Telegram redelivers when it did not hear our 200: the same update id again.
    assert await _post(hook, update, SECRET) == 200
    assert await _post(hook, _update(hook, "and then", 702), SECRET) == 200
    await hook.replies(OWNER, 2)
    assert hook.fake.sent_texts(OWNER) == ["once", "next"]
    assert [r.messages[-1].content for r in hook.model.requests] == ["hello", "and then"]


async def test_webhook_mode_needs_a_secret_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    root = tmp_path / "home"
    make_home(root)
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(
        bot_toml.read_text()
        + f'\n[channels.telegram]\nmode = "webhook"\nwebhook_url = "{WEBHOOK_URL}"\n'
    )
    home = Home(root)
    with pytest.raises(ConfigError, match="webhook_secret_env is not set"):
        create_channel(home.bot("atlas"), None)  # type: ignore[arg-type]  # fails before using it
