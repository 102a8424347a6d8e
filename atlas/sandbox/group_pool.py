"""Cgroups made ahead of the commands that join them, and reused or removed after them, off
their path.

Making a sandbox's cgroup (a folder per v1 hierarchy, its limits written) and removing it cost a
few milliseconds of file-system calls per command, and the sweep of leftovers as much again
(docs/benchmarks.md, "Sandbox limits"). So a worker thread keeps POOL_SIZE groups ready for each
set of limits in use, takes released groups back (`give_back`: up to REUSED_MAX ready, the rest
removed) and sweeps, while commands take a ready group (`take`) and hand it back (`later`).
This module knows nothing of cgroups: atlas/sandbox/limits.py gives it how to make a group,
recycle one and sweep. Containment does not change: a group holds its limits when it is taken,
is joined by one command at a time, and whatever is still in it when it is released is killed
at once, by the caller (atlas/sandbox/limits.py `release`); it is given back only once empty
(a group with a live process is removed instead, once its processes are gone), its limits
checked and re-written where they differ.

Per process: a forked child starts with an empty pool and a worker of its own (a group made by
its parent is never handed out twice).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atlas.sandbox.limits import Group, Limits

log = logging.getLogger(__name__)

POOL_SIZE = 2  # groups made ahead per set of limits: a command and the next one, or two at once
REUSED_MAX = 4  # ready groups kept per set of limits, released ones given back included
SWEEP_INTERVAL_S = 2.0  # leftovers are swept at most this often
RETRY_S = 0.05  # a released group still busy (its processes leaving) is retried this often


@dataclass
class Housekeeping:
    """What the worker does besides its jobs (set by atlas/sandbox/limits.py, which owns the
    groups): retry removing released groups still busy (True while some are), and sweep."""

    retry: Callable[[], bool] = lambda: False
    sweep: Callable[[], None] = lambda: None


housekeeping = Housekeeping()


@dataclass
class _Pool:
    pid: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready: dict[Limits, list[Group]] = field(default_factory=dict)
    jobs: queue.SimpleQueue[Callable[[], None]] = field(default_factory=queue.SimpleQueue)
    worker: threading.Thread | None = None
    last_sweep: float = 0.0


_pool = _Pool(os.getpid())


def _current() -> _Pool:
    global _pool
    if _pool.pid != os.getpid():  # forked: the parent's ready groups are the parent's
        _pool = _Pool(os.getpid())
    return _pool


def _submit(job: Callable[[], None]) -> None:
    pool = _current()
    pool.jobs.put(job)
    with pool.lock:
        if pool.worker is None or not pool.worker.is_alive():
            pool.worker = threading.Thread(
                target=_work, args=(pool,), name="atlas-cgroups", daemon=True
            )
            pool.worker.start()


def _work(pool: _Pool) -> None:
    busy = False  # released groups whose killed processes were still leaving
    while True:
        try:
            job: Callable[[], None] | None = pool.jobs.get(timeout=RETRY_S if busy else None)
        except queue.Empty:
            job = None
        try:
            if job is not None:
                job()
            busy = housekeeping.retry()
            if job is None:
                continue
            if time.monotonic() - pool.last_sweep > SWEEP_INTERVAL_S:
                pool.last_sweep = time.monotonic()
                housekeeping.sweep()
        except OSError as exc:  # a cgroup file system refusing: the next command makes its own
            log.warning("sandbox limits: the cgroup worker failed (%s)", exc)


def take(wanted: Limits, make: Callable[[Limits], Group | None]) -> Group | None:
    """A ready group with these limits, or None (the caller makes one); the worker refills the
    pool with `make` either way."""
    pool = _current()
    with pool.lock:
        ready = pool.ready.setdefault(wanted, [])
        group = ready.pop() if ready else None
    _submit(lambda: _refill(pool, wanted, make))
    return group


def _refill(pool: _Pool, wanted: Limits, make: Callable[[Limits], Group | None]) -> None:
    while True:
        with pool.lock:
            if len(pool.ready.get(wanted, [])) >= POOL_SIZE:
                return
        group = make(wanted)
        if group is None:
            return
        with pool.lock:
            pool.ready.setdefault(wanted, []).append(group)


def give_back(wanted: Limits, group: Group) -> bool:
    """A released group, empty and holding `wanted`'s limits, ready again; False when
    REUSED_MAX are ready already (the caller removes it)."""
    pool = _current()
    with pool.lock:
        ready = pool.ready.setdefault(wanted, [])
        if group in ready:
            return True  # ready already
        if len(ready) >= REUSED_MAX:
            return False
        ready.append(group)
    return True


def later(job: Callable[[], None]) -> None:
    """Run `job` in the worker (a released group's removal)."""
    _submit(job)


def ready_count(wanted: Limits) -> int:
    pool = _current()
    with pool.lock:
        return len(pool.ready.get(wanted, []))


def wait_idle(timeout: float = 5.0) -> bool:
    """Until the worker has run every job given so far (tests, benchmarks)."""
    done = threading.Event()
    _submit(done.set)
    return done.wait(timeout)


__all__ = [
    "POOL_SIZE",
    "REUSED_MAX",
    "Housekeeping",
    "give_back",
    "housekeeping",
    "later",
    "ready_count",
    "take",
    "wait_idle",
]
