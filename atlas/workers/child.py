"""A worker process: `python -m atlas.workers.child HOME INDEX FD LEVEL PLACEMENT`, started by the
home's process (atlas/workers/pool.py), never by hand.

It serves its share of the home's bots as `atlas run` serves all of them in one process: their
channels, conversation stores, lanes and outbox; recovery of their interrupted turns at start.
What belongs to the home (atlas.db, the scheduler, the dashboard, pairing decisions) it reaches
through its one link to the home's process, which it never outlives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from atlas.home import Home
from atlas.workers.link import Link, adopt_fd
from atlas.workers.plan import Placement

log = logging.getLogger("atlas.worker")


async def serve_share(home: Home, index: int, placement: Placement, link: Link) -> None:
    from atlas.channels.manager import start_channels, stop_channels
    from atlas.process import freeze_long_lived_objects
    from atlas.recovery import resume_interrupted_turns
    from atlas.sandbox.proxy import stop_proxies
    from atlas.services import home_services, start_core, stop_turns
    from atlas.workers.asks import ForwardedAsks
    from atlas.workers.dashboard_ops import serve_dashboard_ops
    from atlas.workers.forwarded_channel import stand_ins
    from atlas.workers.home_db import RemoteHomeStore
    from atlas.workers.routines import RemoteRoutines
    from atlas.workers.routing import Elsewhere

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
        await stop_proxies()
        await stop_channels(running)
        await dispatcher.runtime.close()
        await link.close()


def end_with_the_home() -> None:
    """The home's process is gone (killed: a clean stop of it waits for this one's own). End
    at once, as PDEATHSIG (set by the pool when it started this process) does a moment later,
    before anything here learns of it: between the home's socket closing and the signal, a
    channel's updates failed with LinkClosed, were logged and confirmed to the platform, and
    were lost (the crash test, --workers 2, seed 21). The next start recovers this process's
    turns, as after any crash."""
    os.write(2, b"w: the home's process is gone; ending at once\n")
    os._exit(1)


def main(argv: list[str]) -> int:
    from atlas.process import pause_collection_while_starting, run, setup_logging
    from atlas.secrets import redact_logs

    pause_collection_while_starting()  # until its bots are up

    root, index, fd = Path(argv[0]), int(argv[1]), int(argv[2])
    level = int(argv[3])
    setup_logging(level, prefix=f"w{index} ")
    home = Home(root)
    redact_logs(home)
    placement = Placement.from_json(argv[4])
    link = Link(f"link to the home's process (worker {index})", on_lost=end_with_the_home)

    async def go() -> None:
        await link.open(adopt_fd(fd))
        await serve_share(home, index, placement, link)

    run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
