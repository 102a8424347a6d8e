"""What keeps a node that lost a bot's lease from sending (atlas/cluster/home_node.py), each
piece on its own, against a real server:

- the outbox's claim checks the bot's lease in its own transaction (`PgOutboxRows.lease_fence`):
  an expired lease claims nothing, even when no newer owner has claimed a row yet;
- a sender whose epoch function says the bot is not held writes no row (a row left by it would
  be sent late by the next owner);
- `Outbox.forget` drops a lost bot's queues, its rows left in the database for the next owner.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.cluster.leases import Fence, Leases, bot_resource
from atlas.outbox.engine import StaleEpoch
from atlas.outbox.sender import Outbox
from atlas.store.pg.outbox import PgOutboxRows
from atlas.store.pg.server import PgServer

pytestmark = pytest.mark.postgres

CHANNEL = "fake:atlas"
HERE = Address("atlas", CHANNEL, "42")


class Adapter:
    name = CHANNEL

    def __init__(self, *, hold: bool = False) -> None:
        self.sent: list[str] = []
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> str:
        await self.release.wait()
        self.sent.append(text)
        return f"m{len(self.sent)}"


async def test_a_claim_under_an_expired_lease_is_refused_before_anyone_took_over(
    postgres_url: str,
) -> None:
    async with PgServer(postgres_url) as server:
        lease = await Leases(server).acquire(bot_resource("atlas"), "n1", 0.5)
        assert lease is not None
        rows = PgOutboxRows(server)
        fences: dict[str, Fence | None] = {"atlas": lease.fence}
        rows.lease_fence = fences.get
        row = await rows.add(HERE, "answer", "first")
        assert await rows.claim("atlas", row.id, epoch=lease.epoch)  # held: claimed
        second = await rows.add(HERE, "answer", "second")
        await asyncio.sleep(0.7)  # the lease runs out; nobody takes it
        with pytest.raises(StaleEpoch, match="expired"):
            await rows.claim("atlas", second.id, epoch=lease.epoch)
        fences["atlas"] = None  # the node itself knows it lost it: refused without asking
        with pytest.raises(StaleEpoch, match="does not hold"):
            await rows.claim("atlas", second.id, epoch=lease.epoch)
        stored = await rows.get("atlas", second.id)
        assert stored is not None and stored.state == "pending"  # left for the next owner


async def test_a_sender_without_the_lease_writes_no_row_and_a_lost_bot_is_forgotten(
    postgres_url: str,
) -> None:
    async with PgServer(postgres_url) as server:
        rows = PgOutboxRows(server)
        held = {"atlas": True}

        def epoch_of(bot: str) -> int:
            if not held.get(bot):
                raise StaleEpoch(f"outbox of bot {bot}: not held here")
            return 1

        adapter = Adapter(hold=True)
        outbox = Outbox({CHANNEL: adapter}, None, rows=rows, epoch=epoch_of)  # type: ignore[arg-type]
        first = await outbox.enqueue(HERE, "one", kind="answer")
        await outbox.enqueue(HERE, "two", kind="answer")
        waiting = asyncio.create_task(outbox.wait(HERE, first))
        await asyncio.sleep(0.1)  # "one" is with the channel, "two" queued behind it
        held["atlas"] = False
        await outbox.forget("atlas", "node n1 lost its lease")
        with pytest.raises((StaleEpoch, asyncio.CancelledError)):
            await waiting
        adapter.release.set()
        await asyncio.sleep(0.1)
        assert adapter.sent == []  # cancelled mid-send: nothing reached the channel
        with pytest.raises(StaleEpoch):
            await outbox.enqueue(HERE, "three", kind="answer")
        texts = [r["text"] for r in await server.pool.fetch("SELECT text FROM outbox ORDER BY id")]
        assert texts == ["one", "two"]  # "three" never written
        await outbox.shutdown()
