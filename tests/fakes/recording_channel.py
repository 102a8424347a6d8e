"""A channel that keeps what it is asked to send: the far end of deliveries in tests."""

from __future__ import annotations

from pathlib import Path

from atlas.channels.base import Address
from atlas.outbox.errors import RetryLater
from atlas.providers.base import ToolCall


class RecordingChannel:
    """Implements the Channel protocol: `sent` holds (address, text) in order, `questions` the
    approval questions (answered with `answer`), `tool_calls` the names of the calls shown.
    A thin adapter, as the platforms' are: `send` returns a message id, or raises RetryLater
    while `fail_with` says the platform is down (the outbox keeps and resends)."""

    streams = False

    def __init__(
        self,
        name: str = "fake",
        *,
        answer: str | None = None,
        fail_with: str | None = None,
        shows_errors: bool = True,
    ) -> None:
        self.name = name
        # As the operator's terminal: a failed turn's detail, not the note people get.
        self.shows_errors = shows_errors
        self.answer = answer
        self.fail_with = fail_with  # make send raise RetryLater(fail_with): a platform outage
        self.sent: list[tuple[Address, str]] = []
        self.questions: list[str] = []
        self.tool_calls: list[str] = []

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def typing(self, address: Address) -> None: ...
    async def stream(self, address: Address, text: str) -> None: ...

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        self.tool_calls.append(call.name)

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> str:
        if self.fail_with:
            raise RetryLater(self.fail_with)
        self.sent.append((address, text))
        return str(len(self.sent))

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        self.questions.append(question)
        return self.answer

    def texts(self, address: Address) -> list[str]:
        return [text for a, text in self.sent if a == address]
