"""The home's process's worker processes: started, watched, restarted, stopped.

Share 0 is served by the home's process itself; shares 1..N-1 each by a child process
(atlas/workers/child.py) with one link (atlas/workers/link.py). A worker that dies is
started again with backoff; at its start it recovers its bots' interrupted turns as any
start does after a crash (atlas/recovery.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from subprocess import DEVNULL
from typing import TYPE_CHECKING, Protocol

from atlas.channels.supervisor import ChannelHealth, Health
from atlas.home import Home
from atlas.process import prctl
from atlas.workers.link import Link, LinkClosed, socket_pair
from atlas.workers.plan import Placement

if TYPE_CHECKING:
    from atlas.workers.fork import ForkedWorker

log = logging.getLogger("atlas.workers")

FIRST_DELAY = 0.5  # seconds before a dead worker's first restart, doubled up to MAX_DELAY
MAX_DELAY = 30.0
STEADY = 60.0  # a worker up this long has its backoff reset
STOP_WAIT = 15.0  # a worker's own clean stop (its turns, channels, stores), then it is killed
RESTART_WAIT = 60.0  # how long a request for a dead worker's bot waits for it to be back
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def dies_with_this_process() -> Callable[[], None] | None:
    """What a child runs first, between fork and exec (a `preexec_fn`) or right after a fork:
    have the kernel kill it when this process dies (PDEATHSIG), or exit at once if this
    process died already. Set there, not in the child's own start-up: a home's process killed
    while a new worker was still importing left an orphan that polled its bots' updates beside
    the next start's worker and dropped them (the crash test with --workers 2, seed 1). None
    where prctl does not exist."""
    call = prctl()  # looked up before the fork
    if call is None:
        return None
    parent = os.getpid()

    def in_child() -> None:
        call(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # it died before the line above took effect
            os._exit(1)

    return in_child


class WorkerProcess(Protocol):
    """A worker's process: spawned (asyncio.subprocess.Process) or forked (fork.ForkedProcess)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def kill(self) -> None: ...


@dataclass
class Worker:
    share: int
    link: Link
    process: WorkerProcess | None = None
    home_end: socket.socket | None = None  # this process's end of its link, until it is opened
    up: asyncio.Event = field(default_factory=asyncio.Event)  # its link is open


class WorkerPool:
    def __init__(
        self,
        home: Home,
        placement: Placement,
        *,
        on_link: Callable[[Link], None],
        log_level: int = logging.INFO,
    ) -> None:
        self.home = home
        self.placement = placement
        self._on_link = on_link
        self._log_level = log_level
        self._workers: dict[int, Worker] = {}
        self._keepers: list[asyncio.Task[None]] = []
        self._stopping = False
        # Each worker channel's health as it reports it (the dashboard and `atlas doctor`).
        self.health: dict[str, ChannelHealth] = {}

    async def link(self, share: int) -> Link:
        """The worker's link; while it is being restarted, the new one (up to RESTART_WAIT:
        a report for its bot waits for it rather than failing)."""
        worker = self._workers[share]
        if not worker.up.is_set() and not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.up.wait(), RESTART_WAIT)
        return worker.link

    async def spawn(self, forked: Mapping[int, ForkedWorker] | None = None) -> None:
        """Start every worker process, or adopt the one forked for its share already
        (atlas/workers/fork.py). Their links open in `connect`: a worker's first requests wait
        in its socket until then (a spawned one spends its first second importing)."""
        for share in range(1, self.placement.count):
            worker = self._workers[share] = Worker(share, Link(f"worker {share}"))
            if forked and share in forked:
                worker.process, worker.home_end = forked[share].process, forked[share].home_end
            else:
                await self._start_process(worker)

    async def connect(self) -> None:
        """Open each spawned worker's link, served by `on_link`, and keep the worker running."""
        for worker in self._workers.values():
            await self._open_link(worker)
            self._keepers.append(asyncio.create_task(self._keep(worker), name=worker.link.name))

    async def wait_ready(self, timeout: float) -> list[int]:
        """The shares that became ready within `timeout` seconds (each answered its channels'
        first attempts and recovered its turns)."""

        async def one(worker: Worker) -> int | None:
            try:
                await worker.link.ask("wait_ready")
                return worker.share
            except LinkClosed:
                return None

        waits = [asyncio.create_task(one(w)) for w in self._workers.values()]
        done, pending = await asyncio.wait(waits, timeout=timeout) if waits else (set(), set())
        for task in pending:
            task.cancel()
        return sorted(share for task in done if (share := task.result()) is not None)

    async def stop(self) -> None:
        self._stopping = True
        for keeper in self._keepers:
            keeper.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        await asyncio.gather(*(self._stop(w) for w in self._workers.values()))

    async def _stop(self, worker: Worker) -> None:
        process = worker.process
        if process is None or process.returncode is not None:
            await worker.link.close()
            return
        if worker.home_end is not None:  # spawned, never connected: it ends on the closed end
            worker.home_end.close()
            worker.home_end = None
        else:
            with contextlib.suppress(LinkClosed):
                await worker.link.tell("stop")
        try:
            await asyncio.wait_for(process.wait(), STOP_WAIT)
        except TimeoutError:
            log.warning("worker %d did not stop within %.0f s; killed", worker.share, STOP_WAIT)
            process.kill()
            await process.wait()
        await worker.link.close()

    async def _spawn(self, worker: Worker) -> None:
        await self._start_process(worker)
        await self._open_link(worker)

    async def _start_process(self, worker: Worker) -> None:
        home_end, worker_end = socket_pair()
        args = [str(self.home.root), str(worker.share), str(worker_end.fileno())]
        try:
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "atlas.workers.child",
                *args,
                str(self._log_level),
                self.placement.to_json(),
                pass_fds=[worker_end.fileno()],
                stdin=DEVNULL,
                preexec_fn=dies_with_this_process(),
            )
        except BaseException:
            home_end.close()
            raise
        finally:
            worker_end.close()
        worker.home_end = home_end

    async def _open_link(self, worker: Worker) -> None:
        assert worker.process is not None and worker.home_end is not None
        home_end, worker.home_end = worker.home_end, None
        worker.link = Link(f"worker {worker.share}")
        self._on_link(worker.link)
        worker.link.on("health", self._health)
        await worker.link.open(home_end)
        worker.up.set()
        log.info(
            "worker %d (pid %d): bots %s",
            worker.share,
            worker.process.pid,
            ", ".join(self.placement.shares[worker.share]),
        )

    async def _keep(self, worker: Worker) -> None:
        delay = FIRST_DELAY
        while True:
            started = time.monotonic()
            assert worker.process is not None
            code = await worker.process.wait()
            worker.up.clear()
            await worker.link.close()
            if self._stopping:
                return
            if time.monotonic() - started > STEADY:
                delay = FIRST_DELAY
            log.error(
                "worker %d (pid %d) ended with exit code %s; starting it again in %.1f s",
                worker.share,
                worker.process.pid,
                code,
                delay,
            )
            while True:
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)
                try:
                    await self._spawn(worker)
                    break
                except OSError:  # the interpreter gone (an upgrade mid-run?): keep trying
                    log.exception("worker %d could not be started; trying again", worker.share)

    async def _health(self, name: str, current: Health) -> None:
        health = self.health.get(name)
        if health is None:
            health = self.health[name] = ChannelHealth(name)
        health.become(current)
