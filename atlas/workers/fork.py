"""Workers forked from the home's process once it has imported what every process of the home
imports, instead of each process importing it all again.

A process of Atlas spends ~1.5 s of CPU importing Atlas, aiogram and the model SDK before its
first bot can answer (docs/benchmarks.md, start-up). Two processes importing side by side on
two cores were ready later than one process alone. `atlas run` therefore imports those modules
once, before its event loop starts, and then forks each worker (`fork_workers`): the worker
starts with them in place, sharing their memory pages with the home's process until either
writes to one. The pool adopts each as it would a spawned one (atlas/workers/pool.py).

A fork copies the whole process, so it happens only while that copy is sound: before any event
loop, thread, database connection or listening socket exists, on Linux (a pidfd lets the event
loop wait for the child). Anywhere else, and for every later start of a worker (a restart after
it died, when the home's process has an event loop and threads), the pool spawns a fresh
interpreter instead (`python -m atlas.workers.child`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from atlas.home import Home
from atlas.workers.link import socket_pair
from atlas.workers.plan import Placement
from atlas.workers.pool import dies_with_this_process


def can_fork() -> bool:
    """Whether this process may fork its workers now: Linux's fork and pidfd, and no thread but
    this one (a fork keeps only the calling thread; a lock another held stays locked)."""
    return hasattr(os, "fork") and hasattr(os, "pidfd_open") and threading.active_count() == 1


def import_what_the_bots_use(home: Home) -> None:
    """Import what any process of the home imports before its bots answer their first
    message: a worker's own modules, each configured channel's library and each model's SDK.
    A channel or provider that cannot be loaded is left to the start itself, which says why."""
    import atlas.workers.share  # noqa: F401  (a worker's modules: services, channels, recovery)
    from atlas.channels.settings import configured_platforms
    from atlas.errors import AtlasError
    from atlas.plugins import CHANNELS_GROUP, PluginError, load_plugin
    from atlas.providers.router import provider_class

    platforms: set[str] = set()
    kinds: set[str] = set()
    for bot in home.bots.values():
        try:
            platforms.update(configured_platforms(bot))
            for model in filter(None, (bot.model, bot.settings.fallback_model)):
                kinds.add(home.settings.provider_for(model)[1].kind)
        except AtlasError:
            continue  # check_before_start has passed; a start that meets it again reports it
    for platform in sorted(platforms):
        try:
            target = load_plugin(CHANNELS_GROUP, platform).target
        except PluginError:
            continue
        import_libraries = getattr(target, "import_libraries", None)
        if callable(import_libraries):
            import_libraries()
    for kind in sorted(kinds):
        provider_class(kind).import_sdk()


@dataclass
class ForkedWorker:
    """A worker forked for a share (the key it is kept under)."""

    process: ForkedProcess
    home_end: socket.socket  # the home's end of its link, opened by the pool


def fork_workers(home: Home, placement: Placement, log_level: int) -> dict[int, ForkedWorker]:
    """Import what the bots use, then fork a worker for each share but 0. Call only where
    `can_fork()`, before the event loop starts."""
    import_what_the_bots_use(home)
    sys.stdout.flush()  # else what either buffered would be written twice
    sys.stderr.flush()
    forked: dict[int, ForkedWorker] = {}
    for share in range(1, placement.count):
        home_end, worker_end = socket_pair()
        in_child = dies_with_this_process()
        pid = os.fork()
        if pid == 0:
            others = [home_end, *(worker.home_end for worker in forked.values())]
            _be_worker(home, share, placement, worker_end, log_level, in_child, others)
        worker_end.close()
        forked[share] = ForkedWorker(ForkedProcess(pid), home_end)
    return forked


def _be_worker(
    home: Home,
    share: int,
    placement: Placement,
    worker_end: socket.socket,
    log_level: int,
    in_child: Callable[[], None] | None,
    others: list[socket.socket],
) -> NoReturn:
    """The forked child's whole life: it serves its share and exits, never returning into the
    home's code that forked it."""
    code = 1
    try:
        if in_child is not None:
            in_child()  # first: die with the home's process
        for sock in others:  # the home's ends: held here, the home's death would go unseen
            sock.close()
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.close(stdin)
        from atlas.workers.child import serve_in_this_process, set_up_this_process

        set_up_this_process(share, log_level, forked=True)
        code = serve_in_this_process(home, share, placement, worker_end)
    except KeyboardInterrupt:  # Ctrl-C before its event loop took the signal over
        code = 130
    except BaseException:  # its last words, whatever ended it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class ForkedProcess:
    """A forked worker, as the pool sees a spawned one: the part of asyncio.subprocess.Process
    it uses (pid, returncode, wait, kill)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._reaping: asyncio.Future[int] | None = None

    async def wait(self) -> int:
        """Its exit code once it has ended (negative: the signal that ended it). Any number
        of callers may wait; cancelling one leaves the others waiting."""
        if self._reaping is None:
            self._reaping = asyncio.ensure_future(self._reap())
        return await asyncio.shield(self._reaping)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    async def _reap(self) -> int:
        # A pidfd becomes readable when the process ends; waitpid then collects its status
        # at once. (asyncio's child watchers know only the processes asyncio started.)
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(self.pid)
        ended: asyncio.Future[None] = loop.create_future()
        loop.add_reader(pidfd, lambda: ended.done() or ended.set_result(None))
        try:
            await ended
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        # It has ended: WNOHANG finds its status without blocking.
        _, status = os.waitpid(self.pid, os.WNOHANG)  # noqa: ASYNC222
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode
