"""Messages between nodes on a real PostgreSQL server: a message sent on one node to a bot
owned by another is taken once, by the owner, woken by NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from atlas.cluster import messages as messages_module
from atlas.cluster.leases import FenceError, Leases, bot_resource
from atlas.cluster.messages import Inbox, NodeMessage, NodeMessages
from atlas.cluster.node import ClusterNode, ClusterTiming
from atlas.store.pg.server import PgServer

FAST = ClusterTiming(lease=1.5, heartbeat=0.2)


@pytest.fixture
async def server(postgres_url: str) -> AsyncIterator[PgServer]:
    async with PgServer(postgres_url) as opened:
        yield opened


async def test_a_message_to_a_bot_owned_elsewhere_reaches_its_owner_once(
    server: PgServer,
) -> None:
    owner = ClusterNode(server, "b", ["helper"], FAST, run_scheduler=False)
    await owner.start()
    assert owner.fence("helper") is not None
    got: list[tuple[str, NodeMessage]] = []
    all_in = asyncio.Event()
    await server.pool.execute("CREATE TABLE handled (message_id BIGINT PRIMARY KEY)")

    async def deliver(conn: asyncpg.Connection, messages: list[NodeMessage]) -> None:
        for message in messages:
            # Stored in the claiming transaction: a second delivery would break the key.
            await conn.execute("INSERT INTO handled VALUES ($1)", message.id)
            got.append(("b", message))
        if len(got) >= 20:
            all_in.set()

    # A second inbox on the same node races the first for every notice.
    inboxes = [
        Inbox(NodeMessages(server, "b"), owner.fence, lambda: owner.held, deliver) for _ in range(2)
    ]
    for inbox in inboxes:
        await inbox.start()
    sender = NodeMessages(server, "a")  # node A holds no lease on "helper"
    try:
        ids = await asyncio.gather(
            *(sender.send("helper", "chat", {"text": f"hello {n}"}) for n in range(20))
        )
        # NOTIFY wakes the owner long before the inbox's 5 s sweep would.
        await asyncio.wait_for(all_in.wait(), 4)
        await asyncio.sleep(0.3)  # any second delivery would show up now
        assert sorted(message.id for _, message in got) == sorted(ids)
        assert {message.body["text"] for _, message in got} == {f"hello {n}" for n in range(20)}
        assert {message.from_node for _, message in got} == {"a"}
        rows = await server.pool.fetch("SELECT taken_by, taken_epoch FROM node_messages")
        assert {(row["taken_by"], row["taken_epoch"]) for row in rows} == {("b", 1)}
    finally:
        for inbox in inboxes:
            await inbox.stop()
        await owner.stop()


async def test_a_node_without_the_lease_cannot_take_and_a_failed_handler_unclaims(
    server: PgServer,
) -> None:
    leases = Leases(server)
    lease = await leases.acquire(bot_resource("helper"), "b", 10)
    assert lease is not None
    messages = NodeMessages(server, "b")
    await messages.send("helper", "routine", {"run": 7})
    stranger = NodeMessages(server, "c")
    with pytest.raises(FenceError, match="node 'c' with epoch 1 may not act"):
        await stranger.take("helper", type(lease.fence)(lease.resource, "c", lease.epoch))

    def broken(conn: asyncpg.Connection, taken: list[NodeMessage]) -> None:
        raise RuntimeError("the handler failed")

    with pytest.raises(RuntimeError):
        await messages.take("helper", lease.fence, handle=broken)
    taken = await messages.take("helper", lease.fence)
    assert [(m.kind, m.body) for m in taken] == [("routine", {"run": 7})]
    assert await messages.take("helper", lease.fence) == []


async def test_a_message_waiting_when_the_bot_changes_hands_goes_to_the_new_owner(
    server: PgServer,
) -> None:
    """The notice came while nobody held the bot: the new owner's sweep finds the row."""
    await NodeMessages(server, "a").send("helper", "chat", {"text": "anyone?"})
    got: list[NodeMessage] = []
    arrived = asyncio.Event()

    def deliver(conn: asyncpg.Connection, messages: list[NodeMessage]) -> None:
        got.extend(messages)
        arrived.set()

    owner = ClusterNode(server, "c", ["helper"], FAST, run_scheduler=False)
    inbox = Inbox(
        NodeMessages(server, "c"), owner.fence, lambda: owner.held, deliver, sweep_seconds=0.3
    )
    await inbox.start()  # before the node holds anything: the start's wake finds nothing
    await owner.start()
    try:
        await asyncio.wait_for(arrived.wait(), 3)
        assert [(m.body["text"], m.from_node) for m in got] == [("anyone?", "a")]
    finally:
        await inbox.stop()
        await owner.stop()


async def test_an_inbox_whose_listening_connection_ends_listens_again(
    server: PgServer, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restart or a cut network ends the LISTEN session: the inbox listens again, so
    a notice still wakes it at once (the sweep alone would take `sweep_seconds`)."""
    monkeypatch.setattr(messages_module, "RELISTEN_PAUSE", 0.05)
    owner = ClusterNode(server, "b", ["helper"], FAST, run_scheduler=False)
    await owner.start()
    got: list[NodeMessage] = []

    async def deliver(conn: asyncpg.Connection, messages: list[NodeMessage]) -> None:
        got.extend(messages)

    inbox = Inbox(NodeMessages(server, "b"), owner.fence, lambda: owner.held, deliver)
    inbox.sweep_seconds = 60.0  # only a notice can wake it within this test
    await inbox.start()
    sender = NodeMessages(server, "a")
    first = inbox._listener
    try:
        admin = await asyncpg.connect(postgres_url)
        try:
            ended = await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %' AND datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert len(ended) == 1
        async with asyncio.timeout(10):
            while inbox._listener is None or inbox._listener is first:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        sent = await sender.send("helper", "chat", {"text": "after the cut"})
        async with asyncio.timeout(4):
            while not got:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        assert [message.id for message in got] == [sent]
    finally:
        await inbox.stop()
        await owner.stop()
