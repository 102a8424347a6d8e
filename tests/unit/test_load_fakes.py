"""The load fakes (tests/fakes/load_fakes.py, telegram_server.py) made cheaper per request for
the benchmarks' harness, saying the same on the wire: the fake model holds only what its
answer needs while it waits out its latency (whole bodies kept the garbage collector busy),
keeps its latency and answers at once when it closes; getUpdates waits its timeout, wakes for
an update and for stop()."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.load_fakes import ANSWER_KEYS, AutoOpenAIServer, TimedTelegram
from tests.fakes.telegram_server import FakeTelegram

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "A tool the model may call. " * 20,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for i in range(13)
]


def chat_body(text: str) -> dict[str, Any]:
    return {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are a bot under load."},
            {"role": "user", "content": text},
        ],
        "max_tokens": 100,
        "tools": TOOLS,
    }


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def complete(
    session: aiohttp.ClientSession, model: AutoOpenAIServer, text: str
) -> tuple[aiohttp.ClientResponse, dict[str, Any]]:
    async with session.post(f"{model.base_url}/chat/completions", json=chat_body(text)) as r:
        return r, await r.json()


async def test_the_model_holds_only_what_its_answer_needs_while_it_waits(
    session: aiohttp.ClientSession,
) -> None:
    async with AutoOpenAIServer(latency=0.2) as model:
        held: list[dict[str, Any]] = []
        serve = model._serve

        async def spy(request: Any, body: dict[str, Any], item: Any) -> Any:
            held.append(body)
            return await serve(request, body, item)

        model._serve = spy  # type: ignore[method-assign]
        started = time.monotonic()
        response, answer = await complete(session, model, "T0-5000-1 please answer")
        assert time.monotonic() - started >= 0.2  # the latency is kept
        assert set(held[0]) <= set(ANSWER_KEYS)  # no messages, no tools: they were let go
        # The same answer on the wire as ever.
        assert response.headers["Content-Type"] == "application/json; charset=utf-8"
        assert answer["model"] == "test-model"
        assert answer["choices"][0]["message"] == {
            "role": "assistant",
            "content": "Answer to T0-5000-1.",
        }
        assert model.model_seconds["T0-5000-1"] >= 0.2

        _, answer = await complete(session, model, "T0-5000-2 please [tool]")
        [call] = answer["choices"][0]["message"]["tool_calls"]
        assert call["function"] == {"name": "read_file", "arguments": '{"path": "note.txt"}'}

        model.keep_requests = True  # a test that reads the requests gets them whole
        await complete(session, model, "T0-5000-3 please answer")
        assert model.requests[-1]["tools"] == TOOLS
        assert held[-1]["tools"] == TOOLS


async def test_the_model_answers_at_once_when_it_closes(session: aiohttp.ClientSession) -> None:
    async with AutoOpenAIServer(latency=30) as model:
        waiting = asyncio.create_task(complete(session, model, "T0-5000-1 please answer"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        started = time.monotonic()
    response, answer = await waiting
    assert time.monotonic() - started < 2
    assert answer["choices"][0]["message"]["content"] == "Answer to T0-5000-1."


@pytest.mark.parametrize("kind", [FakeTelegram, TimedTelegram])
async def test_get_updates_waits_its_timeout_and_wakes_for_an_update_or_stop(
    session: aiohttp.ClientSession, kind: type[FakeTelegram]
) -> None:
    fake = kind()
    await fake.start()
    url = f"{fake.base_url}/bot{fake.token}/getUpdates"
    allowed = json.dumps(["message", "callback_query"])

    async def poll(timeout: float, offset: int = 0) -> list[dict[str, Any]]:
        form = {"timeout": str(timeout), "allowed_updates": allowed, "offset": str(offset)}
        async with session.post(url, data=form) as response:
            answer = await response.json()
        assert answer["ok"] is True
        return answer["result"]

    try:
        started = time.monotonic()
        assert await poll(0.3) == []
        assert time.monotonic() - started >= 0.3  # its timeout honoured

        waiting = asyncio.create_task(poll(10))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        update_id = await fake.push(fake.message("hello", user_id=7))
        [update] = await waiting
        assert time.monotonic() - started < 1  # woken by the update, not the timeout
        assert update["update_id"] == update_id
        assert update["message"]["text"] == "hello"

        waiting = asyncio.create_task(poll(10, offset=update_id + 1))
        await asyncio.sleep(0.1)
        started = time.monotonic()
    finally:
        await fake.stop()
    assert await waiting == []
    assert time.monotonic() - started < 2  # stop() answers a waiting poll
