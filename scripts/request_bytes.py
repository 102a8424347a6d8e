"""The bytes a provider receives for one request of a bot, caught on loopback.

The fixed prefix of a request (tool definitions and system prompt) is counted on what Atlas
really sends, not on a re-serialisation of ours: the request goes through the bot's own
provider code (atlas/providers/: its wire shape, its JSON encoder) to a listener on 127.0.0.1
that keeps the body and answers with a one-word completion. Each tool's share is the exact
slice of the body that holds its definition (checked: the slices put together are the body's
`tools` array, byte for byte).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from atlas.home import Bot, Home
from atlas.providers.base import CompletionRequest, Message, ToolSpec
from atlas.providers.router import _make_provider

PROMPT = "OK?"

_OPENAI_ANSWER = {
    "id": "measure",
    "object": "chat.completion",
    "created": 0,
    "model": "measure",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "OK"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
_ANTHROPIC_ANSWER = {
    "id": "measure",
    "type": "message",
    "role": "assistant",
    "model": "measure",
    "content": [{"type": "text", "text": "OK"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


@dataclass(frozen=True)
class SentRequest:
    """One request as the provider received it."""

    wire: str  # "openai" (Chat Completions) or "anthropic" (Messages)
    body: bytes
    tools: dict[str, bytes]  # each tool's definition, as sent, in the order sent
    system: bytes  # the system prompt's part of the body, as sent


def _exact_slices(body: bytes, items: list[Any]) -> list[bytes]:
    """Each item's bytes in `body`; refuses when they are not the body's own bytes."""
    slices = [orjson.dumps(item) for item in items]
    if slices and b"[" + b",".join(slices) + b"]" not in body:
        raise RuntimeError("the tools as re-encoded differ from the bytes sent: cannot slice them")
    return slices


def _parts(wire: str, body: bytes) -> tuple[dict[str, bytes], bytes]:
    sent = orjson.loads(body)
    tools = sent.get("tools") or []
    names = [t["function"]["name"] if wire == "openai" else t["name"] for t in tools]
    by_name = dict(zip(names, _exact_slices(body, tools), strict=True))
    if wire == "openai":
        system = next((m for m in sent["messages"] if m.get("role") == "system"), {})
        system_part = orjson.dumps(system) if system else b""
    else:
        system_part = orjson.dumps(sent["system"]) if sent.get("system") else b""
    if system_part and system_part not in body:
        raise RuntimeError("the system prompt as re-encoded differs from the bytes sent")
    return by_name, system_part


async def sent_request(home: Home, bot: Bot, system: str, tools: list[ToolSpec]) -> SentRequest:
    """Send one request of `bot` (its model's provider) with `system` and `tools` to a
    loopback listener; what it received."""
    provider_name, settings = home.settings.provider_for(bot.model)
    caught: list[bytes] = []

    async def answer(request: web.Request) -> web.Response:
        caught.append(await request.read())
        reply = _ANTHROPIC_ANSWER if settings.kind == "anthropic" else _OPENAI_ANSWER
        return web.json_response(reply)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("POST", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}" + ("" if settings.kind == "anthropic" else "/v1")
    # The key never leaves this machine: the listener is ours.
    key_env = settings.api_key_env
    had_key = key_env is not None and key_env in os.environ
    if key_env and not had_key:
        os.environ[key_env] = "measure-only"
    provider = _make_provider(provider_name, settings.model_copy(update={"base_url": base}))
    try:
        request = CompletionRequest(
            model=bot.model.partition("/")[2],
            system=system,
            messages=[Message("user", PROMPT)],
            tools=tools,
            max_tokens=16,
        )
        await provider.complete(request, None)
    finally:
        await provider.close()
        await runner.cleanup()
        if key_env and not had_key:
            os.environ.pop(key_env, None)
    wire = settings.kind
    tools_sent, system_sent = _parts(wire, caught[-1])
    return SentRequest(wire, caught[-1], tools_sent, system_sent)


def sent_request_sync(home: Home, bot: Bot, system: str, tools: list[ToolSpec]) -> SentRequest:
    return asyncio.run(sent_request(home, bot, system, tools))
