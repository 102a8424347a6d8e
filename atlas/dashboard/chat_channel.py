"""The dashboard's chat as a channel, like the console one: the dispatcher stores what the
person writes and runs turns as for any channel (so it is searchable, with /stop and /mode);
what the turn says is told to the browser tabs that show the chat, as it is written.

Each conversation (one per bot: `Address(bot, "dashboard", "browser")`) has a feed, which
holds only the reply being written now (a tab opened mid-reply shows it); the finished
messages are in the bot's store. Every event goes to the channel's listeners: the dashboard
renders it once and sends it over the browsers' one event stream (Dashboard.attach).

Questions (approvals, ask_user) are not put here: every turn's questions are listed on the
Waiting page (atlas/pending_asks.py), which this chat's page shows too, so `ask` only waits
for that answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from atlas.channels.base import Address, Question, QuestionOutcome
from atlas.providers.base import ToolCall

WEB_CHANNEL = "dashboard"
WEB_CHAT = "browser"
EventKind = Literal["user", "reply", "message"]


@dataclass(frozen=True)
class ChatEvent:
    kind: EventKind  # user: the person's message; reply: the reply so far; message: an answer
    text: str
    tools: tuple[ToolCall, ...] = ()  # the tool calls of the reply (being written, or done)


Listener = Callable[[Address, ChatEvent], None]


@dataclass
class ChatFeed:
    """One conversation's reply being written."""

    partial: str = ""
    tools: list[ToolCall] = field(default_factory=list)


def web_address(bot: str) -> Address:
    return Address(bot, WEB_CHANNEL, WEB_CHAT)


class BrowserChannel:
    """`Channel` (atlas/channels/base.py) for the dashboard's Chat page."""

    name = WEB_CHANNEL
    streams = True
    shows_errors = True  # the operator's dashboard: a failed turn's detail (turn_failure.py)

    def __init__(self) -> None:
        self._feeds: dict[Address, ChatFeed] = {}
        self._listeners: list[Listener] = []
        self.closed = False
        # How long `ask` waits at most. A worker process's turn asks through its link
        # (ForwardedChannel), and the worker's end of the wait is cancelled when answered,
        # never this one: it ends once the gate's timeout is surely over (set by attach).
        self.wait_limit: float | None = None

    def feed(self, address: Address) -> ChatFeed:
        return self._feeds.setdefault(address, ChatFeed())

    def listen(self, listener: Listener) -> None:
        """Call `listener` with every event of every conversation (once, however often)."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def _publish(self, address: Address, event: ChatEvent) -> None:
        for listener in self._listeners:
            listener(address, event)

    def said_by_person(self, address: Address, text: str) -> None:
        """What the person wrote, for every tab showing the chat."""
        self._publish(address, ChatEvent("user", text))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        """No more events (the streams themselves end with the dashboard's hub)."""
        self.closed = True

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        """A finished message (the answer, a note like "Stopped."): the reply so far is done."""
        feed = self.feed(address)
        tools = tuple(feed.tools)  # shown folded under the answer, not lost with the draft
        feed.partial, feed.tools = "", []
        shown = text + "".join(f"\n[file] {path.name}" for path in files or [])
        self._publish(address, ChatEvent("message", shown, tools))

    async def stream(self, address: Address, text: str) -> None:
        feed = self.feed(address)
        feed.partial += text
        self._publish(address, ChatEvent("reply", feed.partial, tuple(feed.tools)))

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        feed = self.feed(address)
        feed.tools.append(call)
        self._publish(address, ChatEvent("reply", feed.partial, tuple(feed.tools)))

    def show_reply(self, address: Address, text: str, tools: list[ToolCall]) -> None:
        """The reply so far as another node writes it (atlas/cluster/live_chat.py)."""
        feed = self.feed(address)
        feed.partial, feed.tools = text, tools
        self._publish(address, ChatEvent("reply", text, tuple(tools)))

    async def typing(self, address: Address) -> None:
        feed = self.feed(address)
        self._publish(address, ChatEvent("reply", feed.partial, tuple(feed.tools)))

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Answered on the page (Waiting's list, shown in the chat): only wait for it."""
        await self._wait()
        return None  # reached only by a forwarded wait nobody still waits on

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        await self._wait()
        return QuestionOutcome("cancelled")  # as in `ask`

    async def _wait(self) -> None:
        if self.wait_limit is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(self.wait_limit)


__all__ = ["WEB_CHANNEL", "BrowserChannel", "ChatEvent", "ChatFeed", "web_address"]
