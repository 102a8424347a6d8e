"""Nodes and leases on a real PostgreSQL server: one holder per lease, epochs that only grow,
and an old holder's renew and fence refused once another node took over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from atlas.cluster.leases import FenceError, LeaseLost, Leases, bot_resource, fenced
from atlas.cluster.nodes import NodeRegistry, NodeSuperseded
from atlas.store.pg.server import PgServer


@pytest.fixture
async def server(postgres_url: str) -> AsyncIterator[PgServer]:
    async with PgServer(postgres_url) as opened:
        yield opened


async def _expire(server: PgServer, resource: str) -> None:
    """Age a lease past its end, as time passing would (the server's clock decides)."""
    await server.pool.execute(
        "UPDATE leases SET expires_at = now() - interval '1 second' WHERE resource = $1",
        resource,
    )


async def test_a_node_registers_heartbeats_and_is_seen_dead_when_silent(server: PgServer) -> None:
    nodes = NodeRegistry(server)
    a = await nodes.register("a")
    await nodes.register("b")
    await nodes.heartbeat("a", a)
    assert await nodes.live_nodes(10) == ["a", "b"]
    await server.pool.execute(
        "UPDATE nodes SET heartbeat_at = now() - interval '11 seconds' WHERE name = 'b'"
    )
    assert await nodes.live_nodes(10) == ["a"]
    assert [(n.name, n.alive) for n in await nodes.all_nodes(10)] == [("a", True), ("b", False)]
    await nodes.leave("a", a)
    assert await nodes.live_nodes(10) == []


async def test_a_second_process_under_the_same_name_supersedes_the_first(
    server: PgServer,
) -> None:
    nodes = NodeRegistry(server)
    first = await nodes.register("a")
    second = await nodes.register("a")
    assert second == first + 1
    await nodes.heartbeat("a", second)
    with pytest.raises(NodeSuperseded, match="another process registered under the same name"):
        await nodes.heartbeat("a", first)


async def test_two_nodes_racing_for_one_lease_give_one_holder(server: PgServer) -> None:
    leases = Leases(server)
    for round_number in range(10):
        resource = bot_resource(f"race{round_number}")
        got = await asyncio.gather(*(leases.acquire(resource, f"n{i}", 10) for i in range(4)))
        winners = [lease for lease in got if lease is not None]
        assert len(winners) == 1 and winners[0].epoch == 1
        holding = (await leases.holdings(resource))[resource]
        assert holding.holder == winners[0].holder


async def test_an_expired_lease_is_taken_over_with_the_next_epoch(server: PgServer) -> None:
    leases = Leases(server)
    resource = bot_resource("atlas")
    old = await leases.acquire(resource, "a", 10)
    assert old is not None and old.epoch == 1
    assert await leases.acquire(resource, "b", 10) is None  # held: nobody else gets it
    await _expire(server, resource)
    racing = await asyncio.gather(
        leases.acquire(resource, "b", 10), leases.acquire(resource, "c", 10)
    )
    new = [lease for lease in racing if lease is not None]
    assert len(new) == 1 and new[0].epoch == 2

    with pytest.raises(LeaseLost, match=r"cannot renew its lease of epoch 1: it is held by"):
        await leases.renew(old, 10)
    with pytest.raises(FenceError, match=r"node 'a' with epoch 1 may not act: it is held by"):
        async with fenced(server, old.fence) as conn:
            await conn.execute("SELECT 1")
    assert not await leases.release(old)  # not ours: nothing changes
    renewed = await leases.renew(new[0], 10)
    assert renewed.expires_at >= new[0].expires_at
    async with fenced(server, new[0].fence) as conn:
        assert await conn.fetchval("SELECT 1") == 1


async def test_an_expired_lease_is_neither_renewed_nor_fenced_even_if_untaken(
    server: PgServer,
) -> None:
    leases = Leases(server)
    lease = await leases.acquire("scheduler", "a", 10)
    assert lease is not None
    await _expire(server, "scheduler")
    with pytest.raises(LeaseLost, match="it expired"):
        await leases.renew(lease, 10)
    with pytest.raises(FenceError, match="may not act"):
        async with fenced(server, lease.fence):
            pass
    again = await leases.acquire("scheduler", "a", 10)
    assert again is not None and again.epoch == 2


async def test_a_released_lease_is_free_at_once_and_its_epoch_keeps_growing(
    server: PgServer,
) -> None:
    leases = Leases(server)
    first = await leases.acquire("bot:x", "a", 10)
    assert first is not None and await leases.release(first)
    assert (await leases.holdings("bot:"))["bot:x"].holder is None
    second = await leases.acquire("bot:x", "b", 10)
    assert second is not None and second.epoch == 2
    with pytest.raises(FenceError, match="held by 'b' with epoch 2"):
        async with fenced(server, first.fence):
            pass


async def test_a_takeover_waits_for_a_fenced_send_in_flight(server: PgServer) -> None:
    """The fence's row lock holds a takeover back until the send has committed, so a send of
    epoch 1 never lands after epoch 2 began."""
    leases = Leases(server)
    await server.pool.execute("CREATE TABLE sends (epoch BIGINT, at TIMESTAMPTZ)")
    old = await leases.acquire("bot:x", "a", 0.5)  # short: it runs out during the send
    assert old is not None
    in_send = asyncio.Event()
    finish = asyncio.Event()

    async def send() -> None:
        async with fenced(server, old.fence) as conn:
            in_send.set()
            await finish.wait()
            await conn.execute("INSERT INTO sends VALUES ($1, clock_timestamp())", old.epoch)

    sending = asyncio.create_task(send())
    await in_send.wait()
    await asyncio.sleep(0.7)  # the lease has expired, the send is still open
    takeover = asyncio.create_task(leases.acquire("bot:x", "b", 10))
    await asyncio.sleep(0.3)
    assert not takeover.done()  # waiting on the send's row lock
    finish.set()
    await sending
    new = await takeover
    assert new is not None and new.epoch == 2
    sent_at = await server.pool.fetchval("SELECT at FROM sends")
    acquired_at = await server.pool.fetchval("SELECT acquired_at FROM leases")
    assert sent_at < acquired_at


async def test_a_paused_holders_open_fence_holds_a_takeover_back_only_briefly(
    postgres_url: str,
) -> None:
    """A holder paused (SIGSTOP) inside a fenced transaction leaves it open, its row lock held:
    the server ends that idle session after the pool's bound, so the takeover goes on rather
    than waiting for as long as the pause lasts."""
    async with (
        PgServer(postgres_url, idle_in_transaction=0.5) as holder_side,
        PgServer(postgres_url) as other_side,
    ):
        old = await Leases(holder_side).acquire("bot:x", "a", 0.3)
        assert old is not None
        inside = asyncio.Event()
        paused = asyncio.Event()  # never set: the holder does nothing more, as when stopped

        async def send_then_pause() -> None:
            async with fenced(holder_side, old.fence):
                inside.set()
                await paused.wait()

        sending = asyncio.create_task(send_then_pause())
        await inside.wait()
        await asyncio.sleep(0.4)  # the lease has run out; the fence's row lock is still held
        new = await asyncio.wait_for(Leases(other_side).acquire("bot:x", "b", 10), 5)
        assert new is not None and new.epoch == old.epoch + 1
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
