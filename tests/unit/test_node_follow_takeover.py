"""A dashboard chat followed across a takeover (atlas/cluster/home_node.py, `_follow_web`).

Node b's Chat page sends a message to a bot held by node a; b follows a's sent rows to show
the answer. Then a stops (killed or paused past its lease) and b gains the bot: b's own
recovery answers, and b's BrowserChannel shows that answer as it sends it. The follow must not
show it a second time; and an answer a sent just before b's gain, which the follow had not read
yet, must still be shown once. Two real HomeNodes (not started: the lease callbacks are called
as ClusterNode would), their real outboxes on PostgreSQL under real leases; each node's page is
its BrowserChannel, whose events are what the page's event stream sends. (Two real
`atlas run --node` processes, b's page included: tests/integration/test_nodes.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from atlas.channels.base import Address
from atlas.channels.manager import RunningChannels
from atlas.cluster.home_node import HomeNode
from atlas.cluster.leases import Lease, Leases
from atlas.dashboard.chat_channel import BrowserChannel, ChatEvent, web_address
from atlas.dispatch import Inbound
from atlas.outbox.sender import Outbox
from atlas.store.pg.outbox import PgOutboxRows
from atlas.store.pg.server import PgServer

pytestmark = pytest.mark.postgres

BOT = "helper"
ADDRESS = web_address(BOT)
LEASE = 30.0


def no_sqlite(bot: str) -> Any:
    raise AssertionError(f"a node's outbox opened a SQLite database for {bot}")


class Page:
    """A node's Chat page: the finished messages its event stream brings."""

    def __init__(self, browser: BrowserChannel) -> None:
        self.messages: list[str] = []
        browser.listen(self.on_event)

    def on_event(self, address: Address, event: ChatEvent) -> None:
        if address == ADDRESS and event.kind == "message":
            self.messages.append(event.text)


async def forget_bot(bot: str, why: str) -> None:
    return None  # its lanes: none here


def a_node(server: PgServer, name: str) -> tuple[HomeNode, BrowserChannel, Page]:
    browser = BrowserChannel()
    channels: dict[str, Any] = {browser.name: browser}
    outbox = Outbox(channels, no_sqlite, rows=PgOutboxRows(server))
    dispatcher = SimpleNamespace(
        outbox=outbox,
        channels=channels,
        asks=SimpleNamespace(listen=lambda wake: None),
        forget_bot=forget_bot,
    )
    settings = SimpleNamespace(cluster=SimpleNamespace(lease_seconds=LEASE, heartbeat_seconds=1))
    home = SimpleNamespace(bots={BOT: None}, settings=settings)
    node = HomeNode(
        home,  # type: ignore[arg-type]
        server,
        name,
        dispatcher,  # type: ignore[arg-type]
        RunningChannels(),
        make_scheduler=lambda: None,  # type: ignore[arg-type,return-value]
    )

    async def start_bot(bot: str, epoch: int) -> None:
        return None  # its channels and recovery: the answer below stands for what it sends

    node._start_bot = start_bot  # type: ignore[method-assign]
    return node, browser, Page(browser)


async def gain(node: HomeNode, leases: Leases) -> Lease:
    """What ClusterNode does on taking the bot's lease: held, then told (`on_gained`)."""
    lease = await leases.acquire(f"bot:{BOT}", node.name, LEASE)
    assert lease is not None, f"node {node.name} could not take the bot's lease"
    node.cluster.held[BOT] = lease
    node._gained(BOT, lease.epoch)
    return lease


@dataclass
class Two:
    server: PgServer
    leases: Leases
    a: HomeNode
    b: HomeNode
    page_a: Page
    page_b: Page


@pytest.fixture
async def two(postgres_url: str) -> AsyncIterator[Two]:
    async with PgServer(postgres_url) as server:
        a, _, page_a = a_node(server, "a")
        b, _, page_b = a_node(server, "b")
        try:
            yield Two(server, Leases(server), a, b, page_a, page_b)
        finally:
            await a.stop()
            await b.stop()


async def a_stops(two: Two, lease: Lease) -> None:
    """Node a killed or paused past its lease: its lease is over, it sends nothing more."""
    await two.leases.release(lease)
    two.a.cluster.held.pop(BOT)
    await two.a.dispatcher.outbox.shutdown()


async def follow_ends(node: HomeNode) -> None:
    """The dashboard's follow ends by itself (the answer shown), well before WEB_FOLLOW."""
    await asyncio.wait_for(asyncio.gather(*list(node._tasks)), 10)


async def test_an_answer_b_sends_after_taking_the_bot_over_shows_once(two: Two) -> None:
    held_by_a = await gain(two.a, two.leases)
    await two.b.elsewhere.submit(Inbound(ADDRESS, "hello from b's page"))
    await asyncio.sleep(0)  # the follow started, from the rows there are now
    await a_stops(two, held_by_a)
    await gain(two.b, two.leases)
    # b's recovery answers the waiting message: the answer goes out through b's own channel.
    sent = await two.b.dispatcher.outbox.send(ADDRESS, "the answer", kind="answer")
    assert sent.state == "delivered"
    await follow_ends(two.b)
    assert two.page_b.messages == ["the answer"]
    assert two.page_a.messages == []


async def test_an_answer_a_sent_just_before_b_took_the_bot_still_shows_once(two: Two) -> None:
    held_by_a = await gain(two.a, two.leases)
    await two.b.elsewhere.submit(Inbound(ADDRESS, "hello from b's page"))
    # a answers, then stops before b's follow read its rows; b gains the bot at once.
    sent = await two.a.dispatcher.outbox.send(ADDRESS, "a's answer", kind="answer")
    assert sent.state == "delivered"
    await a_stops(two, held_by_a)
    await gain(two.b, two.leases)
    await follow_ends(two.b)
    assert two.page_a.messages == ["a's answer"]  # a's own page (no tab open there)
    assert two.page_b.messages == ["a's answer"]
