"""Fake model servers on 127.0.0.1 that speak the real wire formats, for the real SDKs to talk to.

    async with FakeOpenAIServer() as server:
        server.reply(text="hi")
        server.reply(calls=[("read_file", {"path": "a.txt"})])
        server.fail(429, headers={"Retry-After": "2"})
        ... point a provider at server.base_url ...
        assert server.requests[0]["messages"][0]["role"] == "system"

Each request takes the next scripted answer; with none left it answers 500 saying so and counts
the overrun, so a test can tell "the script ran out" from a real failure.

With `count_prompt` set (a function of the request body), the usage reports that many input
tokens, and the Anthropic fake answers `/v1/messages/count_tokens` with it: a provider's own
count, made deterministic (scripts/measure_tools.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from aiohttp import web

Calls = list[tuple[str, dict[str, Any] | str]]


def pieces(text: str, count: int = 3) -> list[str]:
    """`text` cut into up to `count` non-empty pieces, the way the fakes stream it."""
    if not text:
        return []
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _arguments_json(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


@dataclass
class Scripted:
    """One scripted answer: text and tool calls, or an HTTP failure; after an optional delay."""

    text: str = ""
    calls: Calls = field(default_factory=list)
    usage: dict[str, Any] | None = None  # the API's own usage object; a default when None
    status: int = 200
    body: dict[str, Any] | str | None = None  # for failures; a default error body when None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    pace: float = 0.0  # streamed: its text word by word, this many seconds between frames


def words(text: str) -> list[str]:
    """`text` cut before each word (its spaces kept), the way a paced answer streams it."""
    return re.findall(r"\s*\S+", text)


class FakeModelServer:
    """The shared part: a reply queue, recorded requests, start and stop on a free port."""

    endpoint: ClassVar[str]  # the POST path the API answers on
    name: ClassVar[str]

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # JSON bodies, in order
        self.request_headers: list[dict[str, str]] = []
        self.overruns = 0  # requests that found the script empty
        self.count_prompt: Callable[[dict[str, Any]], int] | None = None  # see the module doc
        self.script: deque[Scripted] = deque()
        self.base_url = ""
        self._ids = itertools.count(1)
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def reply(
        self,
        text: str = "",
        calls: Calls | None = None,
        usage: dict[str, Any] | None = None,
        *,
        delay: float = 0.0,
    ) -> None:
        """Queue an answer with text and/or tool calls (args as a dict, or raw JSON text)."""
        self.script.append(Scripted(text=text, calls=list(calls or []), usage=usage, delay=delay))

    def fail(
        self,
        status: int,
        body: dict[str, Any] | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue an HTTP failure with this status, body (default: the API's error shape) and headers."""
        self.script.append(Scripted(status=status, body=body, headers=dict(headers or {})))

    def answer_raw(self, body: dict[str, Any] | str) -> None:
        """Queue a 200 answer with exactly this body: for answers the API would never give."""
        self.script.append(Scripted(body=body))

    def hang(self, seconds: float) -> None:
        """Queue a request that waits `seconds` before answering 504: for client timeouts."""
        self.script.append(
            Scripted(status=504, body=f"the fake hung for {seconds} s", delay=seconds)
        )

    def assert_complete(self) -> None:
        assert not self.script, (
            f"{len(self.script)} scripted answers of {self.name} were never requested"
        )
        assert not self.overruns, (
            f"{self.name} was asked {self.overruns} more time(s) than scripted"
        )

    async def __aenter__(self) -> Self:
        app = web.Application()
        self._add_routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = self._base_url(port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing.set()  # wakes hanging handlers so shutdown does not wait for them
        if self._runner is not None:
            await self._runner.cleanup()

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post(self.endpoint, self._handle)

    def _base_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        if not self.script:
            self.overruns += 1
            message = f"{self.name}: the script ran out at request {len(self.requests)}"
            return web.json_response(self._error_body(500, message), status=500)
        return await self._serve(request, body, self.script.popleft())

    async def _serve(
        self, request: web.Request, body: dict[str, Any], item: Scripted
    ) -> web.StreamResponse:
        """Answer one request as `item` says: after its delay, a failure, a stream or JSON."""
        if item.delay:
            with contextlib.suppress(TimeoutError):  # the delay ran its course: answer now
                await asyncio.wait_for(self._closing.wait(), item.delay)
        if item.status != 200 or item.body is not None:
            return self._failure(item)  # as scripted, status and body
        if body.get("stream"):
            return await self._stream(request, self._events(body, item), item.pace)
        return web.json_response(self._answer(body, item))

    def _failure(self, item: Scripted) -> web.Response:  # or a raw answer
        body = (
            item.body
            if item.body is not None
            else self._error_body(item.status, f"fake failure {item.status}")
        )
        if isinstance(body, str):
            return web.Response(status=item.status, text=body, headers=item.headers)
        return web.json_response(body, status=item.status, headers=item.headers)

    async def _stream(
        self, request: web.Request, frames: list[str], pace: float = 0.0
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for index, frame in enumerate(frames):
            if index:  # each frame leaves as its own chunk, as a real server's would
                await asyncio.sleep(pace)  # paced: a slow server's
            await response.write(frame.encode())
        await response.write_eof()
        return response

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # What each API does differently.
    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def _answer(self, body: dict[str, Any], item: Scripted) -> dict[str, Any]:
        raise NotImplementedError

    def _events(self, body: dict[str, Any], item: Scripted) -> list[str]:
        raise NotImplementedError


class FakeOpenAIServer(FakeModelServer):
    """Chat Completions: POST /v1/chat/completions, and GET /v1/models."""

    endpoint = "/v1/chat/completions"
    name = "FakeOpenAIServer"

    def __init__(self, models: tuple[str, ...] = ("test-model",)) -> None:
        super().__init__()
        self.models = models

    def _add_routes(self, app: web.Application) -> None:
        super()._add_routes(app)
        app.router.add_get("/v1/models", self._list_models)

    def _base_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}/v1"

    async def _list_models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def _usage(self, item: Scripted, body: dict[str, Any] | None = None) -> dict[str, Any]:
        usage = item.usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if self.count_prompt is not None and body is not None:
            usage = {**usage, "prompt_tokens": self.count_prompt(body)}
        return usage

    def _answer(self, body: dict[str, Any], item: Scripted) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
        if item.calls:
            message["tool_calls"] = [
                {
                    "id": self._next_id("call_"),
                    "type": "function",
                    "function": {"name": name, "arguments": _arguments_json(args)},
                }
                for name, args in item.calls
            ]
        return {
            "id": self._next_id("chatcmpl-"),
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if item.calls else "stop",
                }
            ],
            "usage": self._usage(item, body),
        }

    def _events(self, body: dict[str, Any], item: Scripted) -> list[str]:
        chunk_id, model = self._next_id("chatcmpl-"), body.get("model", "")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            data = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(data)}\n\n"

        frames = [chunk({"role": "assistant", "content": ""})]
        cut = words(item.text) if item.pace else pieces(item.text)
        frames += [chunk({"content": piece}) for piece in cut]
        for index, (name, args) in enumerate(item.calls):
            start = {
                "index": index,
                "id": self._next_id("call_"),
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            frames.append(chunk({"tool_calls": [start]}))
            frames += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in pieces(_arguments_json(args))
            ]
        frames.append(chunk({}, "tool_calls" if item.calls else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            data = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": self._usage(item, body),
            }
            frames.append(f"data: {json.dumps(data)}\n\n")
        frames.append("data: [DONE]\n\n")
        return frames


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeAnthropicServer(FakeModelServer):
    """Anthropic Messages: POST /v1/messages."""

    endpoint = "/v1/messages"
    name = "FakeAnthropicServer"

    def __init__(self) -> None:
        super().__init__()
        self.count_requests: list[dict[str, Any]] = []  # bodies sent to count_tokens

    def _add_routes(self, app: web.Application) -> None:
        super()._add_routes(app)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.count_requests.append(body)
        if self.count_prompt is None:
            message = f"{self.name}: count_tokens needs count_prompt set"
            return web.json_response(self._error_body(500, message), status=500)
        return web.json_response({"input_tokens": self.count_prompt(body)})

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _usage(self, item: Scripted) -> dict[str, Any]:
        return item.usage or {"input_tokens": 10, "output_tokens": 5}

    def _content(self, item: Scripted) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": item.text}] if item.text else []
        blocks += [
            {
                "type": "tool_use",
                "id": self._next_id("toolu_fake_"),
                "name": name,
                "input": json.loads(args) if isinstance(args, str) else args,
            }
            for name, args in item.calls
        ]
        return blocks

    def _answer(self, body: dict[str, Any], item: Scripted) -> dict[str, Any]:
        return {
            "id": self._next_id("msg_fake_"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": self._content(item),
            "stop_reason": "tool_use" if item.calls else "end_turn",
            "stop_sequence": None,
            "usage": self._usage(item),
        }

    def _events(self, body: dict[str, Any], item: Scripted) -> list[str]:
        def event(kind: str, **data: Any) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        usage = self._usage(item)
        start_usage = {**usage, "output_tokens": 1}  # the real API counts output in message_delta
        message = {
            "id": self._next_id("msg_fake_"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        frames = [event("message_start", message=message)]
        for index, block in enumerate(self._content(item)):
            if block["type"] == "text":
                frames.append(
                    event(
                        "content_block_start",
                        index=index,
                        content_block={"type": "text", "text": ""},
                    )
                )
                frames += [
                    event(
                        "content_block_delta",
                        index=index,
                        delta={"type": "text_delta", "text": piece},
                    )
                    for piece in pieces(block["text"])
                ]
            else:
                frames.append(
                    event("content_block_start", index=index, content_block={**block, "input": {}})
                )
                frames += [
                    event(
                        "content_block_delta",
                        index=index,
                        delta={"type": "input_json_delta", "partial_json": piece},
                    )
                    for piece in pieces(json.dumps(block["input"]))
                ]
            frames.append(event("content_block_stop", index=index))
        frames.append(
            event(
                "message_delta",
                delta={
                    "stop_reason": "tool_use" if item.calls else "end_turn",
                    "stop_sequence": None,
                },
                usage={"output_tokens": usage.get("output_tokens", 0)},
            )
        )
        frames.append(event("message_stop"))
        return frames
