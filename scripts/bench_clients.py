"""What one HTTP call costs the daemon's CPU through each client it uses, against a plain one.

    uv run python scripts/bench_clients.py [--calls 3000] [--in-flight 50] [--json]

A turn's CPU is mostly spent making HTTP calls: one or two to the model, one or two to
Telegram. This measures, per call, the CPU this process spends (user + system, all threads)
while `--in-flight` calls run at once, `--calls` in all, each way:

- `provider`: `OpenAIProvider.complete()`, what a turn pays for a model call (our message and
  tool conversion, then one aiohttp POST with the SDK client's headers: wire.JsonPoster);
- `openai_sdk`: the same request body through the SDK's request path alone (`client.post`, as
  the provider sent it until 2026-12-04);
- `openai_plain`: the same body and headers as one aiohttp POST, the answer read with orjson;
- `telegram_aiogram`: aiogram's `Bot.send_message`, as every reply goes out;
- `telegram_plain`: the same form as one aiohttp POST, the answer read with orjson;
- `slack_sdk`: slack_sdk's `chat_postMessage` on a client holding a session, as the Slack
  channel makes it; `slack_sdk_no_session`: the same on a client without one, where slack_sdk
  opens a session, and so a connection, per call (`slack_sdk_no_session_over_session`).

`*_over_plain` is the ratio of a library's cost to the plain call's: what the library adds on
top of the HTTP exchange itself. The fake servers (tests/fakes) run in a child process, so
their CPU is not counted; everything listens on 127.0.0.1 only, and uvloop runs the loop as in
the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.loadkit import machine, print_result

TOKEN = "123456:BENCH-token"
SLACK_TOKEN = "xoxb-bench"
CHAT_ID = 5000
REPLY = "Here is what I found: **three** files, and the second one holds the answer you wanted."


async def serve_fakes() -> None:
    """The child: a fake model (answers at once), a fake Telegram and a fake Slack; their
    URLs on stdout."""
    from tests.fakes.load_fakes import AutoOpenAIServer, TimedTelegram
    from tests.fakes.slack_server import FakeSlack

    async with AutoOpenAIServer(latency=0.0) as model:
        telegram = TimedTelegram(token=TOKEN, keep_calls=False)
        await telegram.start()
        slack = FakeSlack(bot_token=SLACK_TOKEN)
        await slack.start()
        urls = {"model": model.base_url, "telegram": telegram.base_url, "slack": slack.api_url}
        print(json.dumps(urls), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
        await telegram.stop()
        await slack.close()


def _request() -> Any:
    """A request shaped like a turn's: the built-in tools, a system prompt, a short history."""
    from atlas.providers.base import CompletionRequest, Message
    from atlas.tools.catalog import default_registry

    specs = [tool.spec() for tool in default_registry() if not tool.deferred]
    history = [
        Message("user" if n % 2 == 0 else "assistant", f"message {n}: " + "words " * 40)
        for n in range(10)
    ]
    history.append(Message("user", "T0-5000-1 please answer"))
    return CompletionRequest("test-model", "You are a helpful bot. " * 60, history, specs)


async def measure(
    name: str, call: Callable[[], Awaitable[Any]], calls: int, in_flight: int
) -> dict[str, float]:
    """CPU microseconds per call and calls per second, `in_flight` at a time."""
    for _ in range(20):  # warm up: connections opened, models built, caches filled
        await call()
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    cpu_before, wall_before = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
    return {
        f"{name}_cpu_us_per_call": round(cpu / calls * 1e6, 1),
        f"{name}_calls_per_s": round(calls / wall),
    }


async def bench(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    import aiohttp
    import orjson
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    from atlas.config import ProviderSettings
    from atlas.providers.openai import OpenAIProvider, to_openai_messages, to_openai_tools

    request = _request()
    provider = OpenAIProvider("bench", ProviderSettings(kind="openai", base_url=urls["model"]))
    client = provider._get_client()  # the SDK client the provider made, as a turn uses it
    body = {
        "model": request.model,
        "messages": to_openai_messages(request.system, request.messages),
        "max_tokens": request.max_tokens,
        "tools": to_openai_tools(request.tools),
    }
    session = aiohttp.ClientSession()
    model_url = f"{urls['model']}/chat/completions"
    headers = {"Authorization": f"Bearer {client.api_key}", "Content-Type": "application/json"}

    async def sdk_model_call() -> Any:  # the SDK's own request path, as turns went before
        raw = await client.post("/chat/completions", cast_to=bytes, content=orjson.dumps(body))
        return orjson.loads(raw)

    async def plain_model_call() -> Any:
        async with session.post(model_url, data=orjson.dumps(body), headers=headers) as response:
            return orjson.loads(await response.read())

    api = TelegramAPIServer.from_base(urls["telegram"])
    bot = Bot(TOKEN, session=AiohttpSession(api=api))
    telegram_url = f"{urls['telegram']}/bot{TOKEN}/sendMessage"
    form = {"chat_id": str(CHAT_ID), "text": REPLY, "parse_mode": "HTML"}

    async def plain_telegram_call() -> Any:
        async with session.post(telegram_url, data=form) as response:
            return orjson.loads(await response.read())

    from slack_sdk.web.async_client import AsyncWebClient

    slack = AsyncWebClient(token=SLACK_TOKEN, base_url=urls["slack"], session=session)
    slack_no_session = AsyncWebClient(token=SLACK_TOKEN, base_url=urls["slack"])

    result: dict[str, Any] = {"calls": args.calls, "in_flight": args.in_flight}
    try:
        ways: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("provider", lambda: provider.complete(request)),
            ("openai_sdk", sdk_model_call),
            ("openai_plain", plain_model_call),
            ("telegram_aiogram", lambda: bot.send_message(CHAT_ID, REPLY, parse_mode="HTML")),
            ("telegram_plain", plain_telegram_call),
            ("slack_sdk", lambda: slack.chat_postMessage(channel="D1", text=REPLY)),
            (
                "slack_sdk_no_session",
                lambda: slack_no_session.chat_postMessage(channel="D1", text=REPLY),
            ),
        ]
        for name, call in ways:
            result |= await measure(name, call, args.calls, args.in_flight)
    finally:
        await session.close()
        await bot.session.close()
        await provider.close()
    for library, baseline, ratio_name in (
        ("openai_sdk", "openai_plain", "openai_sdk_over_plain"),
        ("telegram_aiogram", "telegram_plain", "telegram_aiogram_over_plain"),
        ("slack_sdk_no_session", "slack_sdk", "slack_sdk_no_session_over_session"),
    ):
        ratio = result[f"{library}_cpu_us_per_call"] / result[f"{baseline}_cpu_us_per_call"]
        result[ratio_name] = round(ratio, 2)
    result["request_body_kb"] = round(len(orjson.dumps(body)) / 1024, 1)
    return result | {f"machine_{key}": value for key, value in machine().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from atlas.process import run

    child = subprocess.Popen(
        [sys.executable, __file__, "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
    )
    try:
        assert child.stdout is not None
        urls = json.loads(child.stdout.readline())
        print_result(run(bench(args, urls)), args.json)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        from atlas.process import run

        run(serve_fakes())
    else:
        sys.exit(main())
