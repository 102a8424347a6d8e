"""A message sent while a turn runs is answered next, in the order the person sent it: the
request of the next turn ends with it (never with the bot's own answer, which Anthropic models
would continue rather than answer), on each provider's wire format, and again after a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.home import Home
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.fakes.model_servers import FakeAnthropicServer, FakeModelServer, FakeOpenAIServer
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, close_test_stores, make_home

ADDRESS = Address("atlas", "test", "chat-1", user="u1")


def texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of a request body's messages, either wire format."""
    found = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):  # Anthropic's blocks
            content = " ".join(part.get("text", "") for part in content)
        if message["role"] != "system":
            found.append((message["role"], content or ""))
    return found


def home_for(path: Path, server: FakeModelServer) -> Home:
    kind = "anthropic" if isinstance(server, FakeAnthropicServer) else "openai"
    config = BASE_CONFIG.format(base_url=server.base_url).replace(
        'kind = "openai"', f'kind = "{kind}"'
    )
    return make_home(path, config=config)


async def until(predicate: Any, what: str) -> None:
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_a_message_sent_during_a_turn_is_answered_next_in_order(
    home_path: Path, wire: str
) -> None:
    server = FakeOpenAIServer() if wire == "openai" else FakeAnthropicServer()
    async with server:
        home = home_for(home_path, server)
        runtime = Runtime(home, registry=ToolRegistry())
        channel = RecordingChannel()
        dispatcher = Dispatcher(runtime, {"test": channel})
        server.reply(text="echo: first", delay=0.4)
        server.reply(text="echo: second")
        server.reply(text="echo: third")
        try:
            await dispatcher.submit(Inbound(ADDRESS, "first"))
            await until(lambda: len(server.requests) == 1, "the first turn's request")
            await dispatcher.submit(Inbound(ADDRESS, "second"))  # while the model thinks
            await dispatcher.wait_idle(ADDRESS)
            assert [text for _, text in channel.sent] == ["echo: first", "echo: second"]
            assert texts(server.requests[1]) == [
                ("user", "first"),
                ("assistant", "echo: first"),
                ("user", "second"),
            ]
            # After a restart the stored history reads the same way.
            await dispatcher.shutdown()
            await runtime.close()
            await close_test_stores()
            runtime = Runtime(Home(home_path), registry=ToolRegistry())
            dispatcher = Dispatcher(runtime, {"test": channel})
            await dispatcher.submit(Inbound(ADDRESS, "third"))
            await dispatcher.wait_idle(ADDRESS)
            assert texts(server.requests[2]) == [
                ("user", "first"),
                ("assistant", "echo: first"),
                ("user", "second"),
                ("assistant", "echo: second"),
                ("user", "third"),
            ]
        finally:
            await dispatcher.shutdown()
            await runtime.close()
            await close_test_stores()
