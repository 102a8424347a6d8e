"""The node loop on a real PostgreSQL server with short timings: bots shared fairly, moved
when a node joins or goes silent, and a paused node's fence refused after the takeover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from atlas.cluster.leases import SCHEDULER, FenceError, Leases, fenced
from atlas.cluster.node import ClusterNode, ClusterTiming
from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer

BOTS = ["a", "b", "c", "d"]
FAST = ClusterTiming(lease=1.5, heartbeat=0.2)


@pytest.fixture
async def server(postgres_url: str) -> AsyncIterator[PgServer]:
    async with PgServer(postgres_url) as opened:
        yield opened


class Recorder:
    """The callbacks of one node, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int | None]] = []
        self.holding: dict[str, int] = {}

    def gained(self, bot: str, epoch: int) -> None:
        self.events.append(("gained", bot, epoch))
        self.holding[bot] = epoch

    def lost(self, bot: str) -> None:
        self.events.append(("lost", bot, None))
        self.holding.pop(bot, None)


def _node(server: PgServer, name: str, recorder: Recorder, **kwargs: object) -> ClusterNode:
    return ClusterNode(
        server,
        name,
        BOTS,
        FAST,
        on_gained=recorder.gained,
        on_lost=recorder.lost,
        **kwargs,  # type: ignore[arg-type]
    )


async def _until(condition: Callable[[], bool], seconds: float, what: str) -> float:
    """Wait for `condition`; return how long it took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def _shares(*nodes: ClusterNode) -> list[int]:
    return [len(node.held) for node in nodes]


async def _holders(server: PgServer) -> dict[str, str | None]:
    return {
        resource: holding.holder
        for resource, holding in (await Leases(server).holdings("bot:")).items()
    }


def test_the_heartbeat_must_fit_twice_in_the_lease() -> None:
    with pytest.raises(AtlasError, match="at most half the lease"):
        ClusterTiming(lease=1.0, heartbeat=0.8)


async def test_two_nodes_share_four_bots_and_a_third_joining_rebalances(
    server: PgServer,
) -> None:
    seen = {name: Recorder() for name in ("n1", "n2", "n3")}
    n1, n2, n3 = (_node(server, name, seen[name]) for name in ("n1", "n2", "n3"))
    await asyncio.gather(n1.start(), n2.start())
    try:
        await _until(lambda: _shares(n1, n2) == [2, 2], 5, "a 2/2 split")
        assert set(n1.held) | set(n2.held) == set(BOTS)
        assert seen["n1"].holding.keys() == n1.held.keys()  # the callbacks agree
        assert [n.scheduler is not None for n in (n1, n2)].count(True) == 1

        epochs = {bot: lease.epoch for node in (n1, n2) for bot, lease in node.held.items()}
        await n3.start()
        await _until(lambda: sorted(_shares(n1, n2, n3)) == [1, 1, 2], 5, "a 2/1/1 split")
        holders = await _holders(server)
        assert sorted(holders.values()) == sorted(
            name for node in (n1, n2, n3) for name in [node.name] * len(node.held)
        )
        moved = [bot for bot, _ in seen["n3"].holding.items()]
        assert len(moved) == 1
        assert any(
            event[:2] == ("lost", moved[0]) for event in seen["n1"].events + seen["n2"].events
        )
        # The move bumped its epoch.
        assert seen["n3"].events == [("gained", moved[0], epochs[moved[0]] + 1)]
    finally:
        await asyncio.gather(n1.stop(), n2.stop(), n3.stop())
    assert set((await _holders(server)).values()) == {None}  # a clean stop releases


async def test_a_silent_node_loses_its_bots_within_a_lease_and_a_heartbeat(
    server: PgServer,
) -> None:
    seen = {name: Recorder() for name in ("n1", "n2")}
    n1, n2 = (_node(server, name, seen[name]) for name in ("n1", "n2"))
    await asyncio.gather(n1.start(), n2.start())
    try:
        await _until(lambda: _shares(n1, n2) == [2, 2], 5, "a 2/2 split")
        paused = dict(n2.held)
        fences = {bot: lease.fence for bot, lease in paused.items()}
        await n2.suspend()  # stops heartbeating and renewing, tells nobody
        took = await _until(lambda: len(n1.held) == 4, 10, "n1 holding all four")
        # Expiry within a lease of n2's last renewal, then n1's next round; the slack is for a
        # loaded machine (measured figures: scripts/bench_failover.py).
        assert took < FAST.lease + FAST.heartbeat + 1.0
        for bot, fence in fences.items():
            assert n1.held[bot].epoch == fence.epoch + 1
            with pytest.raises(FenceError, match=rf"bot:{bot}: node 'n2' .* held by 'n1'"):
                async with fenced(server, fence):
                    pass
        # n2 wakes up: its leases count as lost before it could use them.
        assert n2.fence(next(iter(paused))) is None
        n2.resume()
        await _until(lambda: seen["n2"].holding == {}, 2, "n2's on_lost calls")
        await _until(lambda: _shares(n1, n2) == [2, 2], 5, "a 2/2 split again")
    finally:
        await asyncio.gather(n1.stop(), n2.stop())


async def test_a_node_cut_off_from_the_database_gives_up_before_its_leases_end(
    server: PgServer,
) -> None:
    seen = Recorder()
    node = _node(server, "n1", seen)
    await node.start()
    try:
        await _until(lambda: len(node.held) == 4, 5, "n1 holding all four")
        stuck = asyncio.Event()

        async def hang(*args: object, **kwargs: object) -> None:
            stuck.set()
            await asyncio.Event().wait()  # the server never answers

        node.registry.heartbeat = hang  # type: ignore[method-assign]
        await stuck.wait()
        await _until(lambda: seen.holding == {}, FAST.lease + 1, "on_lost for every bot")
        # Given up while the database still shows the leases as ours and unexpired: nobody
        # else could have taken them yet.
        leases = await Leases(server).holdings("bot:")
        assert {holding.holder for holding in leases.values()} == {"n1"}
        assert node.fence("a") is None and node.scheduler_fence is None
    finally:
        await node.suspend()


async def test_one_node_holds_the_scheduler_and_another_takes_it_after_a_clean_stop(
    server: PgServer,
) -> None:
    changes: list[tuple[str, int | None]] = []
    n1 = ClusterNode(server, "n1", [], FAST, on_scheduler=lambda e: changes.append(("n1", e)))
    n2 = ClusterNode(server, "n2", [], FAST, on_scheduler=lambda e: changes.append(("n2", e)))
    await n1.start()
    await n2.start()
    try:
        assert n1.scheduler is not None and n2.scheduler is None
        await n1.stop()
        await _until(lambda: n2.scheduler is not None, 2, "n2 taking the scheduler")
        assert changes == [("n1", 1), ("n1", None), ("n2", 2)]
        holding = (await Leases(server).holdings(SCHEDULER))[SCHEDULER]
        assert (holding.holder, holding.epoch) == ("n2", 2)
    finally:
        await n2.stop()
