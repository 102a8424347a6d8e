"""The dashboard's reply relayed between nodes (atlas/cluster/live_chat.py), without a database:
the holder's pieces, what a slow send does to the turn, and how the following node applies them.
The relay over a real PostgreSQL between two `atlas run --node` is in
tests/integration/test_nodes.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from atlas.cluster.live_chat import LiveChatRelay, Reply, pieces
from atlas.dashboard.chat_channel import BrowserChannel, ChatEvent, web_address
from atlas.providers.base import ToolCall

NOTIFY_LIMIT = 8000  # bytes PostgreSQL takes in a NOTIFY payload


class SlowPool:
    """`server.pool.execute` that records each NOTIFY and waits while `gate` is closed."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def execute(self, query: str, channel: str, payload: str) -> None:
        await self.gate.wait()
        self.sent.append(json.loads(payload))


class Server:
    def __init__(self) -> None:
        self.pool = SlowPool()


def relay(node: str) -> tuple[LiveChatRelay, BrowserChannel, SlowPool]:
    server = Server()
    live = LiveChatRelay(cast(Any, server), node, armed_for=60.0)
    browser = BrowserChannel()
    live.watch(browser)
    return live, browser, server.pool


def test_pieces_fit_a_notify_and_rebuild_the_reply() -> None:
    text = ("ünï\x01 " * 3000) + "x" * 5000  # multibyte, escaped and plain characters
    call = ToolCall("c1", "write_file", json.dumps({"content": "y" * 50_000}))
    follower, browser, _ = relay("b")
    follower.follow("bot")
    out = pieces("bot", "a", Reply(), Reply(text, (call,)))
    for piece in out:
        assert len(json.dumps(piece, ensure_ascii=False).encode()) < NOTIFY_LIMIT
        follower.show(piece)
    feed = browser.feed(web_address("bot"))
    assert feed.partial == text
    assert [(tool.id, tool.name) for tool in feed.tools] == [("c1", "write_file")]
    assert len(feed.tools[0].arguments) < len(call.arguments)  # cut to fit
    # What follows continues it; a reply that does not continue it starts from nothing.
    assert pieces("bot", "a", Reply("ab"), Reply("abc"))[0]["at"] == 2
    assert pieces("bot", "a", Reply("ab"), Reply("xy"))[0]["at"] == 0


def test_the_follower_shows_only_what_continues_its_reply() -> None:
    follower, browser, _ = relay("b")
    feed = browser.feed(web_address("bot"))
    piece = {"bot": "bot", "node": "a", "at": 0, "tools_at": 0, "text": "Hello"}
    follower.show(piece)
    assert feed.partial == ""  # nobody follows the bot here
    follower.follow("bot")
    follower.show({**piece, "node": "b"})
    assert feed.partial == ""  # its own
    follower.show(piece)
    follower.show({**piece, "at": 9, "text": " lost"})  # a piece missed before this one
    follower.show({**piece, "at": 5, "text": " world"})
    assert feed.partial == "Hello world"
    follower.show({**piece, "text": "New"})  # the next reply
    assert feed.partial == "New"
    follower.unfollow("bot", answered=False)  # timed out: the relayed draft goes
    assert feed.partial == ""
    follower.show({**piece, "text": "late"})  # after the follow: not shown
    assert feed.partial == ""
    # This node gains the bot mid-reply: the relayed draft goes, its own turn writes the next.
    follower.follow("bot")
    follower.show(piece)
    follower.holds = {"bot"}.__contains__
    follower.clear_shown("bot")
    follower.show({**piece, "at": 5, "text": " again"})
    assert feed.partial == ""


async def test_a_slow_database_never_holds_the_turn_and_the_newest_reply_wins() -> None:
    holder, browser, pool = relay("a")
    address = web_address("bot")
    await browser.stream(address, "not armed")
    await asyncio.sleep(0)
    assert pool.sent == []  # nobody follows: nothing relayed
    await browser.send(address, "done")
    holder.arm("bot")
    pool.gate.clear()  # the database is slow
    for word in ("one", " two", " three"):
        await asyncio.wait_for(browser.stream(address, word), 0.5)  # never waits on it
        await asyncio.sleep(0)
    pool.gate.set()
    for _ in range(20):
        await asyncio.sleep(0)
    shown = "".join(piece.get("text", "") for piece in pool.sent)
    assert shown == "one two three"
    assert len(pool.sent) < 3  # coalesced while the database was slow
    # Finished while a piece waits: the rest is dropped, the next reply starts from nothing.
    pool.gate.clear()
    await browser.stream(address, " four")
    await asyncio.sleep(0)
    await browser.send(address, "one two three four")
    await browser.stream(address, "Next")
    pool.gate.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert pool.sent[-1]["at"] == 0 and pool.sent[-1]["text"] == "Next"
    await holder.stop()


def test_a_reply_event_is_what_the_page_gets() -> None:
    _, browser, _ = relay("b")
    events: list[ChatEvent] = []
    browser.listen(lambda _address, event: events.append(event))
    browser.show_reply(web_address("bot"), "so far", [])
    assert events == [ChatEvent("reply", "so far")]
