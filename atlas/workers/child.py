"""A worker process: forked from the home's process at start (atlas/workers/fork.py), or
`python -m atlas.workers.child HOME INDEX FD LEVEL PLACEMENT` when the pool starts one afresh
(atlas/workers/pool.py); never by hand.

It serves its share of the home's bots as `atlas run` serves all of them in one process: their
channels, conversation stores, lanes and outbox; recovery of their interrupted turns at start.
What belongs to the home (atlas.db, the scheduler, the dashboard, pairing decisions) it reaches
through its one link to the home's process, which it never outlives.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from atlas.home import Home
from atlas.workers.link import Link, adopt_fd
from atlas.workers.plan import Placement


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
    """A worker spawned afresh (a restart, or where forking is not safe: atlas/workers/fork.py)."""
    from atlas.process import pause_collection_while_starting

    pause_collection_while_starting()  # until its bots are up
    root, index, fd, level = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    set_up_this_process(index, level)
    return serve_in_this_process(Home(root), index, Placement.from_json(argv[4]), adopt_fd(fd))


def set_up_this_process(index: int, level: int, *, forked: bool = False) -> None:
    """Its name and its logging; `forked`: a worker forked from the home's process replaces
    the logging set-up it inherited."""
    from atlas.process import name_this_process, setup_logging

    name_this_process(worker_process_name(index))
    setup_logging(level, prefix=f"w{index} ", replace=forked)


def serve_in_this_process(
    home: Home, index: int, placement: Placement, worker_end: socket.socket
) -> int:
    """Serve share `index` on `worker_end` until the home's process says stop."""
    from atlas.process import run
    from atlas.secrets import redact_logs
    from atlas.workers.share import serve_share

    redact_logs(home)
    link = Link(f"link to the home's process (worker {index})", on_lost=end_with_the_home)

    async def go() -> None:
        await link.open(worker_end)
        await serve_share(home, index, placement, link)

    run(go())
    return 0


WORKER_NAME_PREFIX = "atlas-worker"


def worker_process_name(index: int) -> str:
    """What `ps -o comm` and /proc/PID/comm show for worker `index` (the kernel keeps 15 bytes):
    a forked worker's command line is the home's own, so this is how it is told apart."""
    return f"{WORKER_NAME_PREFIX}{index}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
