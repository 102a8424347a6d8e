"""Fakes for load, crash and fault runs: a model server that answers by itself after a set
latency (a tool call when the user's message asks for one), and a Telegram fake that times
when each update was served and each reply arrived.

    async with AutoOpenAIServer(latency=0.5) as model:   # no script needed
        ...                                                # a message with "[tool]" gets a
                                                           # read_file call, then a text answer

Turn tags: a user message carrying `T<bot>-<chat>-<n>` has that tag echoed in the answer, so a
driver can match each reply to its turn, and the server's own time is kept per tag (the part of
a turn the daemon is not responsible for).

Outages: give either fake a `FaultMix` and a share of its requests fail at random (seeded): the
model answers 429 with Retry-After, 500, hangs past the client's timeout, says the context is
too long, or sends a tool call with malformed arguments; Telegram answers 429 with
retry_after, 500 or nginx's HTML 502 page, or drops the connection before the request reaches
the API (not on sendMessage: a send cut off that way may have arrived, so Atlas does not repeat
it and tells the person instead, which would cost a message, not time).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from atlas.agent.compaction import SUMMARY_PROMPT
from atlas.dispatch import TURN_FAILED
from tests.fakes.model_servers import FakeOpenAIServer, Scripted
from tests.fakes.telegram_server import FakeTelegram

# The request's keys FakeOpenAIServer builds an answer from (model_servers.py `_serve`).
ANSWER_KEYS = ("model", "stream", "stream_options")
TAG = re.compile(r"\bT\d+-\d+-\d+\b")
TOOL_MARK = "[tool]"
TOOL_FILE = "note.txt"  # the small file the tool turns read, in each bot's workspace
CONTEXT_OVERFLOW_BODY = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 131072 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


MODEL_FAULTS = ("429", "500", "timeout", "context_length")
TELEGRAM_FAULTS = ("429", "500", "html502", "drop")
TELEGRAM_SEND_FAULTS = ("429", "500", "html502")  # what Atlas retries on sendMessage
# What a bot calls on every turn; a fault in any of them must cost time, never a message.
TELEGRAM_FAULTY_METHODS = frozenset({"getUpdates", "sendMessage", "sendChatAction"})


@dataclass
class FaultMix:
    """A share (`rate`) of requests fail, each in one of the kinds the fake offers (and `only`
    allows), drawn at random from `seed`; what was injected is counted by kind."""

    rate: float
    seed: int = 0
    retry_after: int = 1  # seconds, in a 429's Retry-After / retry_after
    only: frozenset[str] | None = None  # e.g. {"bad_json"}: no other kind
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if not 0 <= self.rate <= 1:
            raise ValueError(f"a fault rate is a share of requests, 0 to 1 (got {self.rate})")
        self._rng = random.Random(self.seed)

    def draw(self, kinds: Sequence[str]) -> str | None:
        """A fault kind for this request, or None (most requests)."""
        allowed = [kind for kind in kinds if self.only is None or kind in self.only]
        if not allowed or not self.rate or self._rng.random() >= self.rate:
            return None
        kind = self._rng.choice(allowed)
        self.injected[kind] += 1
        return kind


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def turn_tag(messages: list[dict[str, Any]]) -> str:
    """The tag of the latest user message that has one ('' when none does)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            found = TAG.search(_text_of(message))
            if found:
                return found.group(0)
    return ""


class AutoOpenAIServer(FakeOpenAIServer):
    """Chat Completions that answer without a script: after `latency` seconds, a `read_file`
    call when the last message is the user's and asks for `[tool]`, else a text answer echoing
    the turn tag; a compaction's request for a summary gets one at once. Scripted answers
    (`fail`, `hang`, `reply`) still come first, so a test can place a fault exactly;
    `random_faults` injects them at random instead (a "timeout" hangs `hang_seconds`: set it
    past the client's timeout), and makes that share of tool calls carry malformed arguments."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        random_faults: FaultMix | None = None,
        hang_seconds: float = 0.0,
    ) -> None:
        super().__init__()
        self.latency = latency
        self.random_faults = random_faults
        self.hang_seconds = hang_seconds
        self.handled = 0
        self.tool_calls_made = 0
        self.model_seconds: dict[str, float] = defaultdict(float)  # tag -> time spent here
        # tag -> when its first request arrived and its last answer was ready (monotonic),
        # so a benchmark can tell the daemon's time before, between and after model calls
        self.first_request_at: dict[str, float] = {}
        self.last_answer_at: dict[str, float] = {}
        self.keep_requests = False  # bodies grow with the history: keep them only in tests
        self._pauses: set[asyncio.Future[None]] = set()  # answers waiting out their delay

    async def __aexit__(self, *exc_info: object) -> None:
        for pause in self._pauses:  # answer now, as the base class's hanging handlers do
            if not pause.done():
                pause.set_result(None)
        await super().__aexit__(*exc_info)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        try:
            # orjson: a load run's bodies are ~15 KB (13 tools, the history), which it parses
            # in half the stdlib's time; the same dicts, lists and strings.
            body = orjson.loads(await request.read())
        except ConnectionResetError:  # the client died mid-request (a crash test's SIGKILL)
            return web.Response(status=499)
        self.handled += 1
        if self.keep_requests:
            self.requests.append(body)
        tag = turn_tag(body.get("messages", []))
        self.first_request_at.setdefault(tag, started)
        try:
            item = self.script.popleft() if self.script else self._drawn_fault()
            item = item or self._auto(body, tag)
            if not (self.keep_requests or self.count_prompt):
                # What the answer is built from, and only that, is held through the latency:
                # hundreds of requests waiting with their whole bodies kept the garbage
                # collector busy (full collections of 80 ms, in the harness's own loop).
                body = {key: body[key] for key in ANSWER_KEYS if key in body}
            if item.delay:
                await self._pause(item.delay)
                item = dataclasses.replace(item, delay=0.0)
            return await self._serve(request, body, item)
        finally:
            self.last_answer_at[tag] = time.monotonic()
            self.model_seconds[tag] += self.last_answer_at[tag] - started

    async def _pause(self, seconds: float) -> None:
        """Wait out an answer's delay (the model's latency, a hang) unless the server closes
        first: a future and a timer, where the base class's wait_for starts a task per call."""
        if self._closing.is_set():
            return
        loop = asyncio.get_running_loop()
        pause: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(seconds, _resolve, pause)
        self._pauses.add(pause)
        try:
            await pause
        finally:
            timer.cancel()
            self._pauses.discard(pause)

    def _drawn_fault(self) -> Scripted | None:
        faults = self.random_faults
        kind = faults.draw(MODEL_FAULTS) if faults else None
        if faults and kind == "429":
            return Scripted(status=429, headers={"Retry-After": str(faults.retry_after)})
        if kind == "500":
            return Scripted(status=500)
        if kind == "timeout":
            return Scripted(status=504, body="the fake hung", delay=self.hang_seconds)
        if kind == "context_length":
            return Scripted(status=400, body=CONTEXT_OVERFLOW_BODY)
        return None

    def _auto(self, body: dict[str, Any], tag: str) -> Scripted:
        messages = body.get("messages", [])
        if (
            messages
            and messages[0].get("role") == "system"
            and (_text_of(messages[0]) == SUMMARY_PROMPT)
        ):  # compaction asks for a summary of the middle of a long conversation
            return Scripted(text=f"Summary: {len(_text_of(messages[-1]))} characters of talk.")
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and TOOL_MARK in _text_of(last):
            self.tool_calls_made += 1
            arguments: dict[str, Any] | str = {"path": TOOL_FILE}
            if self.random_faults and self.random_faults.draw(("bad_json",)):
                arguments = '{"path": "note.txt"'  # cut short: not JSON
            return Scripted(calls=[("read_file", arguments)], delay=self.latency)
        if last.get("role") == "tool":
            return Scripted(text=f"Read it. {tag} done.", delay=self.latency)
        return Scripted(text=f"Answer to {tag}.", delay=self.latency)

    def overflow(self) -> None:
        """Queue OpenAI's context-length error (400, code context_length_exceeded)."""
        self.fail(400, body=CONTEXT_OVERFLOW_BODY)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass
class Sent:
    chat_id: int
    text: str
    at: float  # time.monotonic() when the fake received it


@dataclass
class TimedTelegram(FakeTelegram):
    """FakeTelegram that records when each update was handed out and each message arrived,
    and can wake a waiter when a reply carrying a turn tag comes in, or when the chat is told
    its turn failed (the tag is then in `told_failed`)."""

    served_at: dict[int, float] = field(default_factory=dict)  # update_id -> monotonic
    sent: list[Sent] = field(default_factory=list)
    keep_calls: bool = True  # False for long runs: `calls` would grow with every poll
    random_faults: FaultMix | None = None  # random 429s, 5xx and drops on the calls of a turn
    told_failed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._waiters: dict[str, asyncio.Future[float]] = {}
        self.polls = 0  # getUpdates calls answered: > 0 once the bot polls
        self.confirmed_below = 0  # the highest offset a getUpdates confirmed

    def expect(self, tag: str) -> asyncio.Future[float]:
        """A future resolved with the arrival time of the first reply containing `tag`."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters[tag] = future
        return future

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if self.random_faults and method in TELEGRAM_FAULTY_METHODS:
            kinds = TELEGRAM_SEND_FAULTS if method == "sendMessage" else TELEGRAM_FAULTS
            kind = self.random_faults.draw(kinds)
            if kind:
                self.fail_next(method, kind, retry_after=self.random_faults.retry_after)
        response = await super()._api(request)
        if not self.keep_calls and self.calls:
            self.calls.clear()
            self._history.clear()
        return response

    async def _m_getUpdates(self, params: dict[str, Any]) -> web.Response:
        """As Telegram does it: an update handed out stays until a later call's offset
        confirms it, so a bot that dies before storing it gets it again after a restart."""
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        self.polls += 1
        self.confirmed_below = max(self.confirmed_below, offset)

        def ready() -> list[dict[str, Any]]:
            return [u for u in self.updates if u["update_id"] >= offset][:limit]

        async with self._new_update:
            if offset:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            if not ready() and timeout:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._new_update.wait_for(lambda: bool(ready()) or self._stopping)
            handed = ready()
        now = time.monotonic()
        for update in handed:
            self.served_at.setdefault(update["update_id"], now)
        if self.keep_calls:
            self._history.extend(handed)
        return web.json_response({"ok": True, "result": handed})

    async def _m_sendMessage(self, params: dict[str, Any]) -> web.Response:
        response = await super()._m_sendMessage(params)
        if response.status == 200:
            now = time.monotonic()
            text = str(params["text"])
            self.sent.append(Sent(int(params["chat_id"]), text, now))
            tags = TAG.findall(text)
            if text.startswith(TURN_FAILED):  # no tag: it speaks for the chat's pending turn
                chat = f"-{params['chat_id']}-"
                tags = [tag for tag in self._waiters if chat in tag]
                self.told_failed.update(tags)
            for tag in tags:
                waiter = self._waiters.pop(tag, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(now)
        return response


__all__ = [
    "CONTEXT_OVERFLOW_BODY",
    "TOOL_FILE",
    "TOOL_MARK",
    "AutoOpenAIServer",
    "FaultMix",
    "Sent",
    "TimedTelegram",
    "turn_tag",
]
