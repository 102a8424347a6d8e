"""The dashboard's reply as it is written, from the bot's holder to the node whose Chat page
sent the message (NOTIFY on `atlas_chat_live`; no rows).

The holder (`LiveChatRelay.on_event`, a listener of its BrowserChannel) relays the reply so far
of a bot whose dashboard chat another node follows (`arm`, at that node's message). The
listener only records the newest reply so far per bot; one sender task sends what changed
since it last sent, in order, as small pieces: a slow or absent database or follower never
holds back the turn, and what was not sent yet is coalesced into the next piece or dropped
once the finished message is out (the finished message is what stays: it comes as before,
from the holder's sent rows).

Each piece says where it goes: `at` (the text's length before it) and `tools_at` (the count
of tool calls before it). The following node (`show`) applies a piece only on top of exactly
that much (or a fresh reply: both 0), so a piece missed (the listening connection was down)
stops the live text of that reply rather than showing it wrong. A NOTIFY's payload holds at
most 8000 bytes: text goes in pieces of PIECE_CHARS, a tool call alone with its arguments cut
to ARGUMENTS_CHARS (the finished message loads the stored calls in their place).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from atlas.dashboard.chat_channel import BrowserChannel, ChatEvent, web_address
from atlas.providers.base import ToolCall

if TYPE_CHECKING:
    from atlas.channels.base import Address
    from atlas.store.pg.server import PgServer

log = logging.getLogger(__name__)

LIVE_CHANNEL = "atlas_chat_live"
PIECE_CHARS = 1000  # at most 4 bytes each in UTF-8 (6 escaped): well under 8000 bytes
ARGUMENTS_CHARS = 1000


@dataclass(frozen=True)
class Reply:
    """A reply so far: its text and its tool calls."""

    text: str = ""
    tools: tuple[ToolCall, ...] = ()


def pieces(bot: str, node: str, sent: Reply, now: Reply) -> list[dict[str, Any]]:
    """The NOTIFY payloads that bring a follower from `sent` to `now` (from nothing when `now`
    does not continue `sent`: a new reply)."""
    if not (now.text.startswith(sent.text) and now.tools[: len(sent.tools)] == sent.tools):
        sent = Reply()
    out: list[dict[str, Any]] = []
    at, tools_at = len(sent.text), len(sent.tools)
    for start in range(at, len(now.text), PIECE_CHARS):
        text = now.text[start : start + PIECE_CHARS]
        out.append({"bot": bot, "node": node, "at": start, "tools_at": tools_at, "text": text})
    for index in range(tools_at, len(now.tools)):
        call = now.tools[index]
        tool = [call.id, call.name, call.arguments[:ARGUMENTS_CHARS]]
        out.append({"bot": bot, "node": node, "at": len(now.text), "tools_at": index, "tool": tool})
    return out


class LiveChatRelay:
    """Both ends: the holder's relay (`arm`, `on_event`) and the follower's (`follow`, `show`)."""

    def __init__(
        self,
        server: PgServer,
        node: str,
        armed_for: float,
        holds: Callable[[str], bool] = lambda bot: False,
    ) -> None:
        self.server = server
        self.node = node
        self.holds = holds  # whether this node holds the bot's lease
        self.armed_for = armed_for  # seconds a bot's reply is relayed after a message
        self._armed: dict[str, float] = {}  # bot -> until (loop time)
        self._newest: dict[str, Reply] = {}  # bot -> the reply so far not sent yet
        self._sent: dict[str, Reply] = {}  # bot -> what the followers were sent of it
        self._finished: Counter[str] = Counter()  # bot -> its replies finished so far
        self._ready = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._following: Counter[str] = Counter()  # bot -> follows running on this node
        self._shown: dict[str, Reply] = {}  # bot -> the relayed reply this node shows
        self.browser: BrowserChannel | None = None  # this node's Chat channel (set by watch)

    def watch(self, browser: BrowserChannel) -> None:
        self.browser = browser
        browser.listen(self.on_event)

    async def stop(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            self._sender = None

    # -- on the holder ----------------------------------------------------------------------

    def arm(self, bot: str) -> None:
        """Another node follows `bot`'s dashboard chat (its person sent a message there)."""
        loop = asyncio.get_running_loop()
        self._armed[bot] = loop.time() + self.armed_for
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_all(), name=f"live chat {self.node}")

    def disarm(self, bot: str) -> None:
        """No more relaying of `bot`'s replies (this node lost it)."""
        self._armed.pop(bot, None)
        self._newest.pop(bot, None)

    def on_event(self, address: Address, event: ChatEvent) -> None:
        """The BrowserChannel's listener: never waits (the turn publishes through it)."""
        bot = address.bot
        until = self._armed.get(bot)
        if until is None or address != web_address(bot) or event.kind == "user":
            return
        if asyncio.get_running_loop().time() > until:
            del self._armed[bot]
            return
        if event.kind == "message":  # finished: what is not sent yet is not needed any more
            self._newest.pop(bot, None)
            self._sent.pop(bot, None)
            self._finished[bot] += 1
            return
        self._newest[bot] = Reply(event.text, event.tools)
        self._ready.set()

    async def _send_all(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            for bot in list(self._newest):
                now = self._newest.pop(bot, None)
                if now is None:
                    continue
                try:
                    await self._send(bot, now)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.info("live chat %s: not relayed: %s", self.node, exc)  # best effort

    async def _send(self, bot: str, now: Reply) -> None:
        finished = self._finished[bot]
        for piece in pieces(bot, self.node, self._sent.get(bot, Reply()), now):
            if self._finished[bot] != finished:
                return  # the finished message is out: it replaces the rest
            payload = json.dumps(piece, ensure_ascii=False)
            await self.server.pool.execute("SELECT pg_notify($1, $2)", LIVE_CHANNEL, payload)
        if self._finished[bot] == finished:
            self._sent[bot] = now

    # -- on the node following --------------------------------------------------------------

    def follow(self, bot: str) -> None:
        self._following[bot] += 1

    def unfollow(self, bot: str, *, answered: bool) -> None:
        """A follow ended; without its answer (timed out, stopped), the relayed reply it may
        have left on this node's page is cleared."""
        self._following[bot] -= 1
        if self._following[bot] > 0:
            return
        del self._following[bot]
        if answered:
            self._shown.pop(bot, None)
        else:
            self.clear_shown(bot)

    def clear_shown(self, bot: str) -> None:
        """Take the relayed reply so far off this node's page (if it is still what it shows):
        a follow ended without its answer, or this node now holds the bot and writes its own."""
        shown = self._shown.pop(bot, None)
        if shown is None or self.browser is None:
            return
        feed = self.browser.feed(web_address(bot))
        if Reply(feed.partial, tuple(feed.tools)) == shown:
            self.browser.show_reply(web_address(bot), "", [])

    def on_notice(self, conn: object, pid: int, channel: str, payload: str) -> None:
        """A LISTEN callback: a piece from the bot's holder."""
        try:
            self.show(json.loads(payload))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("live chat %s: a piece not understood: %s", self.node, exc)

    def show(self, piece: dict[str, Any]) -> None:
        """Apply one piece to this node's Chat page, if it follows the bot and the piece
        continues what the page shows (or starts a reply)."""
        bot = str(piece["bot"])
        if piece["node"] == self.node or not self._following[bot] or self.browser is None:
            return
        if self.holds(bot):
            return  # this node writes the bot's replies itself now
        at, tools_at = int(piece["at"]), int(piece["tools_at"])
        feed = self.browser.feed(web_address(bot))
        text: str
        tools: tuple[ToolCall, ...]
        if at == 0 and tools_at == 0:
            text, tools = "", ()  # a new reply: whatever was shown before is over
        elif at == len(feed.partial) and tools_at == len(feed.tools):
            text, tools = feed.partial, tuple(feed.tools)
        else:
            return  # a piece missed: the rest of this reply shows once finished
        text += str(piece.get("text", ""))
        if "tool" in piece:
            call_id, name, arguments = piece["tool"]
            tools += (ToolCall(str(call_id), str(name), str(arguments)),)
        self._shown[bot] = Reply(text, tools)
        self.browser.show_reply(web_address(bot), text, list(tools))


__all__ = ["LIVE_CHANNEL", "LiveChatRelay", "Reply", "pieces"]
