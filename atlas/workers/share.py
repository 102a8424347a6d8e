"""What a worker process serves: its share of the home's bots (atlas/workers/plan.py), their
channels, conversation stores, lanes and outbox, and recovery of their interrupted turns at
start; atlas.db, the scheduler, the dashboard and pairing reached through its one link to the
home's process.

Imported by a worker alone, with everything its bots need at start: a worker spawned afresh
imports it after pausing garbage collection (atlas/workers/child.py); the home's process imports
it before forking its workers (atlas/workers/fork.py), which then start with it in place.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from datetime import UTC, datetime

from atlas.channels.manager import start_channels, stop_channels
from atlas.home import Home
from atlas.process import freeze_long_lived_objects
from atlas.recovery import resume_interrupted_turns
from atlas.services import home_services, start_core, stop_turns
from atlas.workers.asks import ForwardedAsks
from atlas.workers.dashboard_ops import serve_dashboard_ops
from atlas.workers.forwarded_channel import stand_ins
from atlas.workers.home_db import RemoteHomeStore
from atlas.workers.link import Link
from atlas.workers.plan import Placement
from atlas.workers.routines import RemoteRoutines
from atlas.workers.routing import Elsewhere

log = logging.getLogger("atlas.worker")


async def serve_share(home: Home, index: int, placement: Placement, link: Link) -> None:
    """Serve share `index` over `link` until the home's process says stop or is gone."""
    started_at = datetime.now(UTC)  # before anything is stored: older messages are a crash's
    stop = asyncio.Event()
    ready = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def wait_ready() -> int:
        await ready.wait()
        return index

    async def stop_now() -> None:
        stop.set()

    link.on("wait_ready", wait_ready)
    link.on("stop", stop_now)
    home.served = placement.served_by(index)
    home.owned = frozenset(placement.shares[index])
    dispatcher = await start_core(home, {}, audit=RemoteHomeStore(home.db_path, link))
    # Its turns' questions listed on the dashboard's Waiting page; the dashboard's mode
    # changes, conversation modes and workbench reach this process.
    dispatcher.asks = ForwardedAsks(link, index)
    serve_dashboard_ops(link, dispatcher, index)
    # cronjob_manage's scheduler: the home's, over the link
    home_services(dispatcher).serve_routines(RemoteRoutines(link, dispatcher.runtime.audit))

    async def home_link(_share: int) -> Link:
        return link  # every request for another share goes through the home's process

    elsewhere = Elsewhere(placement, index, home_link)
    elsewhere.serve(dispatcher)
    elsewhere.handle_on(link)
    dispatcher.elsewhere = elsewhere
    # The dashboard's chat and spread bots' channels live elsewhere: stand-ins forward to them.
    dispatcher.channels.update(stand_ins(home, placement, index, elsewhere.call))
    running = await start_channels(home, dispatcher)
    try:
        for name, health in running.health.items():
            health.listen(lambda name, current: link.tell_soon("health", name, current))
            await link.tell("health", name, health.current)
        recovered = await resume_interrupted_turns(dispatcher, started_at=started_at)
        log.info(
            "bots %s; interrupted turns: %s", ", ".join(sorted(home.served)), recovered.summary()
        )
        freeze_long_lived_objects()
        ready.set()
        link_gone = asyncio.create_task(link.closed.wait())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([link_gone, stopping], return_when=asyncio.FIRST_COMPLETED)
        link_gone.cancel()
        stopping.cancel()
        if link.closed.is_set():
            log.warning("the home's process is gone; stopping")
    finally:
        await stop_turns(dispatcher)
        from atlas.sandbox.proxy import stop_proxies  # loaded by a sandboxed command, if any

        await stop_proxies()
        await stop_channels(running)
        await dispatcher.runtime.close()
        await link.close()
