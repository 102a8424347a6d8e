"""WorkerPool.link: a request for a worker that is being restarted waits for the new one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.workers import pool as pool_module
from atlas.workers.link import Link
from atlas.workers.plan import Placement
from atlas.workers.pool import Worker, WorkerPool
from tests.helpers import make_home


def a_pool(tmp_path: Path) -> tuple[WorkerPool, Worker]:
    home = make_home(tmp_path / "home")
    pool = WorkerPool(home, Placement((("atlas",), ("other",))), on_link=lambda _link: None)
    worker = pool._workers[1] = Worker(1, Link("worker 1 (dead)"))
    return pool, worker


async def test_a_request_waits_for_the_restarted_worker(tmp_path: Path) -> None:
    pool, worker = a_pool(tmp_path)
    asked = asyncio.create_task(pool.link(1))
    await asyncio.sleep(0.05)
    assert not asked.done(), "it waits while the worker is down"
    worker.link = Link("worker 1 (restarted)")
    worker.up.set()
    assert (await asyncio.wait_for(asked, 1)).name == "worker 1 (restarted)"


async def test_the_wait_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "RESTART_WAIT", 0.05)
    pool, _worker = a_pool(tmp_path)
    link = await asyncio.wait_for(pool.link(1), 1)
    assert link.name == "worker 1 (dead)"  # its ask then fails with LinkClosed, as it should
