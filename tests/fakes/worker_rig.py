"""Worker processes in one event loop: each share of a home's bots gets its own Home object,
Runtime (its own model), Dispatcher, agents channel and Elsewhere, wired as `atlas run` wires
the home's process and its children (atlas/daemon.py serve_worker, atlas/workers/child.py),
over real socketpair Links. Share 0 is the home's process: it holds atlas.db (a HomeStore) and
serves each worker's atlas.db work, routine ops and "route"; a worker reaches atlas.db through a
RemoteHomeStore, and the home's routine scheduler through RemoteRoutines.

    async with linked_shares(root, (("atlas",), ("scout",)), models) as shares:
        await shares[0].dispatcher.submit(Inbound(...))
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atlas.agents.channel import AGENTS_CHANNEL, AgentChannel
from atlas.agents.services import HomeServices, provide_services
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.base import ModelClient
from atlas.routines.scheduler import RoutineScheduler
from atlas.runtime import Runtime
from atlas.store.home_db import HomeStore
from atlas.tools.agents import AGENT_TOOLS
from atlas.tools.delegation_search import DELEGATION_TOOLS
from atlas.tools.registry import ToolRegistry
from atlas.tools.routines import ROUTINE_TOOLS
from atlas.trust.gate import OpenGate
from atlas.workers.home_db import RemoteHomeStore, serve_home_db
from atlas.workers.link import Link, socket_pair
from atlas.workers.plan import Placement
from atlas.workers.routines import RemoteRoutines, serve_routines
from atlas.workers.routing import HOME_SHARE, Elsewhere
from tests.fakes.recording_channel import RecordingChannel

CHANNEL = "test"  # every share's platform channel: a RecordingChannel of that name


class _Link(Link):
    """A Link that Elsewhere's `links` lookup may also await (the pool's is async: it waits
    for a worker being restarted)."""

    def __await__(self):  # type: ignore[no-untyped-def]
        return self._itself().__await__()

    async def _itself(self) -> Link:
        return self


@dataclass
class Share:
    index: int
    home: Home
    runtime: Runtime
    channel: RecordingChannel
    agents: AgentChannel
    dispatcher: Dispatcher
    services: HomeServices
    elsewhere: Elsewhere
    links: dict[int, Link] = field(default_factory=dict)  # the home's: one per worker
    # Ops this process answered over a link, in order ("home_db", "route", "deliver"...).
    answered: list[str] = field(default_factory=list)


@dataclass
class Shares:
    placement: Placement
    shares: list[Share]
    scheduler: RoutineScheduler | None = None  # the home's, once `start_scheduler` ran

    def __getitem__(self, index: int) -> Share:
        return self.shares[index]


def _counting(link: Link, answered: list[str]) -> None:
    """Note each op `link` answers (the handlers registered so far)."""
    for op, handler in list(link._handlers.items()):

        async def noted(*args: object, _op: str = op, _handler=handler) -> object:  # type: ignore[no-untyped-def]
            answered.append(_op)
            return await _handler(*args)

        link.on(op, noted)


def _share(index: int, root: Path, placement: Placement, model: ModelClient, audit: HomeStore,
           links: dict[int, Link]) -> Share:  # fmt: skip
    home = Home(root)
    home.served = frozenset(placement.shares[index])
    runtime = Runtime(
        home,
        model=model,
        gate=OpenGate(),
        registry=ToolRegistry([*AGENT_TOOLS, *ROUTINE_TOOLS, *DELEGATION_TOOLS]),
        audit=audit,
    )
    channel = RecordingChannel(CHANNEL)
    agents = AgentChannel(reply_seconds=10)
    dispatcher = Dispatcher(runtime, {CHANNEL: channel, AGENTS_CHANNEL: agents})
    services = provide_services(dispatcher)
    if index == HOME_SHARE:
        elsewhere = Elsewhere(placement, index, lambda share: links[share])
    else:
        elsewhere = Elsewhere(placement, index, lambda _share: links[HOME_SHARE])
    elsewhere.serve(dispatcher)
    dispatcher.elsewhere = elsewhere
    return Share(index, home, runtime, channel, agents, dispatcher, services, elsewhere, links)


@contextlib.asynccontextmanager
async def linked_shares(
    root: Path, shares: tuple[tuple[str, ...], ...], models: Sequence[ModelClient]
) -> AsyncIterator[Shares]:
    placement = Placement(shares)
    home_audit = HomeStore(Home(root).db_path)
    home_links: dict[int, Link] = {}
    made = Shares(placement, [])
    made.shares.append(_share(HOME_SHARE, root, placement, models[0], home_audit, home_links))
    opened: list[Link] = []
    try:
        for index in range(1, placement.count):
            home_end, worker_end = socket_pair()
            to_worker, to_home = _Link(f"worker {index}"), _Link(f"home, from worker {index}")
            await to_worker.open(home_end)
            await to_home.open(worker_end)
            opened += [to_worker, to_home]
            home_links[index] = to_worker
            # The home's side, as atlas/daemon.py serve_worker.
            serve_home_db(to_worker, home_audit)
            made[HOME_SHARE].elsewhere.handle_on(to_worker)
            serve_routines(to_worker, lambda: made.scheduler)
            _counting(to_worker, made[HOME_SHARE].answered)
            # The worker's, as atlas/workers/child.py serve_share.
            audit = RemoteHomeStore(Home(root).db_path, to_home)
            share = _share(index, root, placement, models[index], audit, {HOME_SHARE: to_home})
            share.services.serve_routines(RemoteRoutines(to_home, audit))
            share.elsewhere.handle_on(to_home)
            _counting(to_home, share.answered)
            made.shares.append(share)
        yield made
    finally:
        if made.scheduler is not None:
            await made.scheduler.stop()
        for share in reversed(made.shares):
            await share.services.close()
            await share.agents.stop()
            await share.dispatcher.shutdown()
        for share in reversed(made.shares):
            await share.runtime.close()
        for link in opened:
            await link.close()


async def start_scheduler(shares: Shares) -> RoutineScheduler:
    """The home's scheduler, running every bot's routines where the bot lives (RoutedRuns), as
    `atlas run` starts it; handed to the home's cronjob_manage too."""
    from atlas.workers.routing import RoutedRuns

    home = shares[HOME_SHARE]
    runs = RoutedRuns(home.dispatcher, home.elsewhere)
    scheduler = RoutineScheduler(home.home, home.runtime.audit, runs)  # type: ignore[arg-type]
    home.services.serve_routines(scheduler)
    await scheduler.start()
    shares.scheduler = scheduler
    return scheduler
