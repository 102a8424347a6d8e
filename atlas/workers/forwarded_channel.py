"""A channel that lives in another process, as this process's turns see it.

The dashboard's chat channel lives in the home's process, and a spread bot's Telegram or Slack
channel in the bot's owner; a turn in another worker says what it says (its stream, its answer
through the outbox, its tool calls, its questions) through this stand-in, which forwards each
call to the real channel (op "channel", atlas/workers/routing.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from atlas.channels.base import Address, Channel, Question, QuestionOutcome
from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.workers.plan import Placement

OP = "channel"
FORWARDED = ("send", "stream", "show_tool_call", "typing", "ask", "ask_questions")

# (share, op, *args) → the op's result where that share lives (Elsewhere.call).
Call = Callable[..., Awaitable[Any]]


class ForwardedChannel:
    def __init__(self, name: str, share: int, call: Call, *, streams: bool) -> None:
        self.name = name
        self.streams = streams
        self.share = share  # the process the real channel lives in
        self._call = call

    async def _forward(self, method: str, *args: Any) -> Any:
        return await self._call(self.share, OP, self.name, method, args)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> Any:
        """What the real channel's send returns (the message's id, for the outbox)."""
        return await self._forward("send", address, text, files)

    async def stream(self, address: Address, text: str) -> None:
        await self._forward("stream", address, text)

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        await self._forward("show_tool_call", address, call)

    async def typing(self, address: Address) -> None:
        await self._forward("typing", address)

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        answer: str | None = await self._forward("ask", address, question, choices)
        return answer

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        outcome: QuestionOutcome = await self._forward("ask_questions", address, questions)
        return outcome


def stand_ins(home: Home, placement: Placement, here: int, call: Call) -> dict[str, Channel]:
    """The channels of other processes that turns here may use: the dashboard's chat (in the
    home's process), and each spread bot's platform channels (in the bot's owner)."""
    from atlas.channels.manager import channel_name
    from atlas.channels.settings import configured_platforms
    from atlas.dashboard.chat_channel import WEB_CHANNEL

    found: dict[str, Channel] = {}
    if here != 0 and home.settings.dashboard.enabled:
        found[WEB_CHANNEL] = ForwardedChannel(WEB_CHANNEL, 0, call, streams=True)
    for bot_name in sorted(placement.spread):
        owner = placement.owner(bot_name)
        if owner == here:
            continue
        for platform in configured_platforms(home.bots[bot_name]):
            name = channel_name(platform, bot_name)
            found[name] = ForwardedChannel(name, owner, call, streams=False)
    return found
