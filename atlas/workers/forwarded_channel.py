"""A channel that lives in the home's process, as a worker process's turns see it.

The dashboard's chat is served by the home's process, but a conversation with a bot of
another worker has its turns there: what such a turn says (its stream, its answer through the
outbox, its tool calls) is forwarded over the link (op "channel") to the real channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address, Question, QuestionOutcome
from atlas.errors import AtlasError
from atlas.providers.base import ToolCall
from atlas.workers.link import Link

if TYPE_CHECKING:
    from atlas.channels.base import Channel

OP = "channel"
FORWARDED = ("send", "stream", "show_tool_call", "typing", "ask", "ask_questions")


class ForwardedChannel:
    def __init__(self, name: str, link: Link, *, streams: bool) -> None:
        self.name = name
        self.streams = streams
        self._link = link

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> Any:
        """What the real channel's send returns (the message's id, for the outbox)."""
        return await self._link.ask(OP, self.name, "send", (address, text, files))

    async def stream(self, address: Address, text: str) -> None:
        await self._link.tell(OP, self.name, "stream", (address, text))

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        await self._link.tell(OP, self.name, "show_tool_call", (address, call))

    async def typing(self, address: Address) -> None:
        await self._link.tell(OP, self.name, "typing", (address,))

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        answer: str | None = await self._link.ask(
            OP, self.name, "ask", (address, question, choices)
        )
        return answer

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        outcome: QuestionOutcome = await self._link.ask(
            OP, self.name, "ask_questions", (address, questions)
        )
        return outcome


def serve_channels(link: Link, channels: dict[str, Channel]) -> None:
    """In the home's process: carry out a worker's forwarded channel calls."""

    async def run(name: str, method: str, args: tuple[Any, ...]) -> Any:
        channel = channels.get(name)
        if channel is None or method not in FORWARDED:
            raise AtlasError(f"no channel {name!r} with {method!r} in the home's process")
        return await getattr(channel, method)(*args)

    link.on(OP, run)
