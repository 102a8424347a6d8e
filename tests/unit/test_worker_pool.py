"""WorkerPool.link: a request for a worker that is being restarted waits for the new one."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
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


# A parent that spawns a child with the pool's preexec_fn and is killed at once, as a home's
# process killed while its new worker is still starting.
SPAWN_AND_DIE = """
import asyncio, os, signal, subprocess, sys
from atlas.process import run
from atlas.workers.pool import dies_with_this_process

async def main():
    child = await asyncio.create_subprocess_exec(
        "sleep", "30", stdout=subprocess.DEVNULL, preexec_fn=dies_with_this_process()
    )
    print(child.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

run(main())
"""


def _ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="PDEATHSIG is Linux's")
async def test_a_worker_dies_with_the_home_even_if_killed_right_after_the_fork() -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SPAWN_AND_DIE, stdout=asyncio.subprocess.PIPE
    )
    assert parent.stdout is not None
    child = int((await asyncio.wait_for(parent.stdout.readline(), 10)).decode())
    await parent.wait()
    try:
        for _ in range(200):
            if _ended(child):
                break
            await asyncio.sleep(0.01)
        assert _ended(child), "the child outlived its killed parent"
    finally:
        if not _ended(child):
            os.kill(child, signal.SIGKILL)


async def test_the_pool_starts_its_workers_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    async def spawn(*args: object, **options: object) -> None:
        seen.update(options)
        raise OSError("not started in this test")

    monkeypatch.setattr(pool_module.asyncio, "create_subprocess_exec", spawn)
    pool, worker = a_pool(tmp_path)
    with pytest.raises(OSError):
        await pool._spawn(worker)
    assert callable(seen["preexec_fn"])


async def test_a_worker_spawned_but_never_connected_ends_when_the_pool_stops(
    tmp_path: Path,
) -> None:
    """`atlas run` spawns its workers before it imports the rest of the daemon; a start that
    fails in between stops the pool with no link open: the worker must end, not linger."""
    home = make_home(tmp_path / "home")
    opened: list[Link] = []
    pool = WorkerPool(home, Placement((("atlas",), ("other",))), on_link=opened.append)
    await pool.spawn()
    worker = pool._workers[1]
    assert worker.process is not None and worker.process.returncode is None
    assert worker.home_end is not None and not opened, "no link is opened before connect"
    await asyncio.wait_for(pool.stop(), pool_module.STOP_WAIT + 5)
    assert worker.process.returncode is not None, "the worker ended with the pool"
    assert worker.home_end is None
