"""A scripted model for tests: queued replies, recorded requests, `assert_complete()`."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from atlas.providers.base import (
    CompletionRequest,
    CompletionResponse,
    Message,
    ProviderCallError,
    TextSink,
    ToolCall,
    Usage,
)


@dataclass
class Reply:
    """One scripted model answer: text, tool calls (name, arguments), or an error to raise.
    Arguments given as a str are sent raw (to script malformed JSON)."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    error: ProviderCallError | None = None
    wait_for: asyncio.Event | None = (
        None  # hold the answer until this is set (for concurrency tests)
    )
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=10, output_tokens=5))


class ScriptedModel:
    """Plays back `Reply`s in order; fails loudly when asked for more than it holds."""

    def __init__(self, *replies: Reply, images: bool = True) -> None:
        self.replies: list[Reply] = list(replies)
        self.requests: list[CompletionRequest] = []
        self.images = images
        self._ids = itertools.count(1)

    def add(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def supports_images(self, model: str) -> bool:
        return self.images

    async def complete(
        self,
        request: CompletionRequest,
        *,
        fallback: str | None = None,
        on_text: TextSink | None = None,
    ) -> CompletionResponse:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(
                f"ScriptedModel ran out of replies at request {len(self.requests)}"
            )
        reply = self.replies.pop(0)
        if reply.wait_for:
            await reply.wait_for.wait()
        if reply.error:
            raise reply.error
        if on_text and reply.text:
            for piece in (reply.text[: len(reply.text) // 2], reply.text[len(reply.text) // 2 :]):
                result = on_text(piece)
                if inspect.isawaitable(result):
                    await result
        calls = [
            ToolCall(
                f"call_{next(self._ids)}", name, args if isinstance(args, str) else json.dumps(args)
            )
            for name, args in reply.calls
        ]
        message = Message("assistant", reply.text, tool_calls=calls)
        return CompletionResponse(
            message, reply.usage, request.model, "tool_use" if calls else "end_turn"
        )

    def assert_complete(self) -> None:
        assert not self.replies, f"{len(self.replies)} scripted replies were never requested"
