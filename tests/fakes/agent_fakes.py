"""Fakes for tests of many agents: a model that serves each conversation its own script, and a
channel that records what it sends and answers approval questions as told."""

from __future__ import annotations

import asyncio

from atlas.providers.base import CompletionRequest, CompletionResponse, TextSink
from atlas.providers.scripted import Reply, ScriptedModel


class ConversationModel:
    """Picks the script by a marker found in the conversation's first user message, so that
    concurrent conversations (a parent and its subagents, two bots) each get their own."""

    def __init__(self, scripts: dict[str, list[Reply]]) -> None:
        self.scripts = {marker: ScriptedModel(*replies) for marker, replies in scripts.items()}

    def supports_images(self, model: str) -> bool:
        return True

    def script(self, marker: str) -> ScriptedModel:
        return self.scripts[marker]

    def _pick(self, request: CompletionRequest) -> ScriptedModel:
        first = next((m.content for m in request.messages if m.role == "user"), "")
        for marker, model in self.scripts.items():
            if marker in first:
                return model
        raise AssertionError(f"no script for a conversation starting {first[:200]!r}")

    async def complete(
        self,
        request: CompletionRequest,
        *,
        fallback: str | None = None,
        on_text: TextSink | None = None,
    ) -> CompletionResponse:
        return await self._pick(request).complete(request, fallback=fallback, on_text=on_text)

    def requests(self, marker: str) -> list[CompletionRequest]:
        return self.scripts[marker].requests

    def assert_complete(self) -> None:
        for marker, model in self.scripts.items():
            assert not model.replies, f"{marker!r}: {len(model.replies)} replies never requested"


async def eventually(condition, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    """Poll until `condition()` is true; fail naming `what` after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
