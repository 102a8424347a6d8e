"""The node loop: heartbeat, renew this node's leases, take its fair share, release the excess.

Every `timing.heartbeat` seconds a node heartbeats, renews each lease it holds, reads who is
alive and who holds which bot, and follows `balance.plan`: it releases bots beyond its share
and takes free (or expired) ones up to it. One node at a time also holds the "scheduler"
lease (the routine scheduler runs there).

The watchdog: a lease renewed at (database) time T expires at T + lease. The node notes its
own monotonic time before each round of renewals; if no round has succeeded for
`lease - margin` seconds since (the database unreachable, the process paused, a tick stuck),
the node treats every lease as lost and calls `on_lost` before anyone else can take them over.
A paused process cannot run its watchdog, so the fence (atlas/cluster/leases.py) is what
stops its sends after it wakes up; the watchdog is for the live-but-cut-off case and tells the
bots to stop at once instead of failing send by send.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncpg

from atlas.cluster.balance import plan
from atlas.cluster.leases import (
    BOT_PREFIX,
    SCHEDULER,
    Fence,
    Lease,
    LeaseLost,
    Leases,
    bot_resource,
)
from atlas.cluster.nodes import NodeRegistry, NodeSuperseded
from atlas.errors import AtlasError
from atlas.store.pg.server import PgServer

log = logging.getLogger(__name__)

GainedCallback = Callable[[str, int], Awaitable[None] | None]
LostCallback = Callable[[str], Awaitable[None] | None]
SchedulerCallback = Callable[[int | None], Awaitable[None] | None]

# What a round can fail with when the server is slow or away: the round is retried, the
# watchdog decides when the leases count as lost.
_DATABASE_TROUBLE = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)


@dataclass(frozen=True)
class ClusterTiming:
    """A lease's length and the time between rounds, in seconds."""

    lease: float = 10.0
    heartbeat: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat * 2 <= self.lease:
            raise AtlasError(
                f"cluster timing: the heartbeat ({self.heartbeat} s) must be positive and at "
                f"most half the lease ({self.lease} s), so a lease is renewed before it ends"
            )

    @property
    def margin(self) -> float:
        """How long before a lease's end the watchdog gives it up (slack for the round trip
        and for the event loop's lateness)."""
        return self.lease / 10


async def _call(callback: Callable[..., Awaitable[None] | None] | None, *args: object) -> None:
    if callback is None:
        return
    try:
        result = callback(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:  # a callback's failure must not stop the node's heartbeat
        log.exception("cluster callback %r failed for %r", callback, args)


class ClusterNode:
    """One node of a home: holds leases on its share of `bots` while it runs.

    Every node of a home is given the same `bots` (the home's settings): the shares are
    computed from the live nodes alone, so a node given fewer bots would leave its share
    untaken and the others would keep releasing theirs to it.
    """

    def __init__(
        self,
        server: PgServer,
        name: str,
        bots: Sequence[str],
        timing: ClusterTiming | None = None,
        *,
        on_gained: GainedCallback | None = None,
        on_lost: LostCallback | None = None,
        on_scheduler: SchedulerCallback | None = None,
        run_scheduler: bool = True,
    ):
        self.server = server
        self.name = name
        self.bots = sorted(set(bots))
        self.timing = timing or ClusterTiming()
        self.on_gained = on_gained
        self.on_lost = on_lost
        self.on_scheduler = on_scheduler
        self.run_scheduler = run_scheduler
        self.registry = NodeRegistry(server)
        self.leases = Leases(server)
        self.epoch: int | None = None  # this process's registration
        self.held: dict[str, Lease] = {}  # bot -> its lease
        self.scheduler: Lease | None = None
        self._deadline: float | None = None  # monotonic; past it, every lease counts as lost
        # Lost by the deadline, their on_lost not called yet (fence() cannot await).
        self._pending_lost: list[str] = []
        self._pending_scheduler_lost = False
        self._loop_task: asyncio.Task[None] | None = None
        self._watchdog_task: asyncio.Task[None] | None = None

    # -- what the bots ask ------------------------------------------------------------------

    def fence(self, bot: str) -> Fence | None:
        """The fence for `bot`'s sends, None when this node does not hold it (any more)."""
        self._enforce_deadline()
        lease = self.held.get(bot)
        return lease.fence if lease is not None else None

    @property
    def scheduler_fence(self) -> Fence | None:
        self._enforce_deadline()
        return self.scheduler.fence if self.scheduler is not None else None

    # -- running ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Register, run a first round at once, then keep going in the background."""
        self.epoch = await self.registry.register(self.name)
        try:
            await self.tick()
        except _DATABASE_TROUBLE as exc:
            log.warning("node %s: first round failed, retrying: %s", self.name, exc)
        self.resume()

    def resume(self) -> None:
        """Start (again) the background rounds and the watchdog."""
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._run(), name=f"cluster node {self.name}")
        if self._watchdog_task is None:
            self._watchdog_task = asyncio.create_task(
                self._watch(), name=f"cluster watchdog {self.name}"
            )

    async def suspend(self) -> None:
        """Stop every round and the watchdog without telling anyone, as a paused or frozen
        process does (for tests and the benchmark); `resume` continues."""
        for task in (self._loop_task, self._watchdog_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._loop_task = self._watchdog_task = None

    async def stop(self) -> None:
        """A clean stop: the bots are told first, then the leases released so others take
        them at once, then the node leaves."""
        await self.suspend()
        held, scheduler = dict(self.held), self.scheduler
        await self._lose_all("the node is stopping")
        try:
            for lease in [*held.values(), *([scheduler] if scheduler else [])]:
                await self.leases.release(lease)
            if self.epoch is not None:
                await self.registry.leave(self.name, self.epoch)
        except _DATABASE_TROUBLE as exc:
            log.warning("node %s: leases left to expire (%s)", self.name, exc)

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.timing.lease):
                    await self.tick()
            except NodeSuperseded as exc:
                log.error("%s", exc)
                await self._lose_all("another process took this node's name")
                return
            except _DATABASE_TROUBLE as exc:
                log.warning("node %s: round failed (%s); the watchdog decides", self.name, exc)
            except Exception:  # a bug must not end the rounds: the next one may succeed
                log.exception("node %s: round failed; the watchdog decides", self.name)
            await asyncio.sleep(max(0.0, self.timing.heartbeat - (time.monotonic() - started)))

    async def _watch(self) -> None:
        while True:
            deadline = self._deadline
            if deadline is None:
                await asyncio.sleep(self.timing.heartbeat)
                continue
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
            await self._flush_lost()

    # -- one round --------------------------------------------------------------------------

    async def tick(self) -> None:
        """Heartbeat, renew, then take or release bots to reach this node's share."""
        if self.epoch is None:
            raise AtlasError(f"node {self.name!r}: start() it before running rounds")
        await self._flush_lost()
        round_started = time.monotonic()
        await self.registry.heartbeat(self.name, self.epoch)
        for bot, lease in list(self.held.items()):
            try:
                self.held[bot] = await self.leases.renew(lease, self.timing.lease)
            except LeaseLost as exc:
                log.warning("node %s: %s", self.name, exc)
                await self._lose(bot)
        if self.scheduler is not None:
            try:
                self.scheduler = await self.leases.renew(self.scheduler, self.timing.lease)
            except LeaseLost as exc:
                log.warning("node %s: %s", self.name, exc)
                self.scheduler = None
                await _call(self.on_scheduler, None)
        # Every lease still held was renewed (or taken, below) after round_started.
        self._deadline = round_started + self.timing.lease - self.timing.margin
        await self._balance()
        if self.run_scheduler and self.scheduler is None:
            lease = await self.leases.acquire(SCHEDULER, self.name, self.timing.lease)
            if lease is not None:
                self.scheduler = lease
                await _call(self.on_scheduler, lease.epoch)

    async def _balance(self) -> None:
        live = await self.registry.live_nodes(self.timing.lease)
        holdings = await self.leases.holdings(BOT_PREFIX)
        holders = {
            resource.removeprefix(BOT_PREFIX): holding.holder
            for resource, holding in holdings.items()
        }
        wanted = plan(self.name, live, holders, self.bots)
        for bot in wanted.release:
            lease = self.held.get(bot)
            if lease is None:
                continue
            await self._lose(bot)  # the bot stops first, then others may take it
            await self.leases.release(lease)
            log.info("node %s: released %s (share %d)", self.name, bot, wanted.target)
        for bot in wanted.take:
            if len(self.held) >= wanted.target:
                break
            lease = await self.leases.acquire(bot_resource(bot), self.name, self.timing.lease)
            if lease is None:
                continue  # another node was quicker, or the old lease has not expired yet
            self.held[bot] = lease
            log.info("node %s: took %s (epoch %d)", self.name, bot, lease.epoch)
            await _call(self.on_gained, bot, lease.epoch)

    # -- losing leases ----------------------------------------------------------------------

    def _enforce_deadline(self) -> None:
        """Past the watchdog's deadline every lease counts as lost, at once (the callbacks
        follow in `_flush_lost`): a fence asked for after a pause is refused here already."""
        if self._deadline is None or time.monotonic() < self._deadline:
            return
        overdue = time.monotonic() - self._deadline + self.timing.lease - self.timing.margin
        if self.held or self.scheduler:
            log.warning(
                "node %s: no renewal for %.1f s; treating its leases as lost", self.name, overdue
            )
        self._pending_lost.extend(self.held)
        self._pending_scheduler_lost |= self.scheduler is not None
        self.held.clear()
        self.scheduler = None
        self._deadline = None

    async def _flush_lost(self) -> None:
        self._enforce_deadline()
        bots, self._pending_lost = self._pending_lost, []
        scheduler, self._pending_scheduler_lost = self._pending_scheduler_lost, False
        for bot in bots:
            await _call(self.on_lost, bot)
        if scheduler:
            await _call(self.on_scheduler, None)

    async def _lose(self, bot: str) -> None:
        if self.held.pop(bot, None) is not None:
            await _call(self.on_lost, bot)

    async def _lose_all(self, why: str) -> None:
        await self._flush_lost()
        if self.held or self.scheduler:
            log.info("node %s: giving up its leases: %s", self.name, why)
        for bot in list(self.held):
            await self._lose(bot)
        if self.scheduler is not None:
            self.scheduler = None
            await _call(self.on_scheduler, None)
        self._deadline = None
