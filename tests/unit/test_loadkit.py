"""scripts/loadkit.py's readings for the benchmarks with worker processes: the home they write
asks for N workers (and a spread bot), the daemon's environment agrees, and the CPU of the
daemon counts its live worker children, which the parent's own /proc/PID/stat leaves out
until they end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from atlas.home import Home
from atlas.workers.plan import WORKERS_ENV, worker_count
from scripts.loadkit import (
    Daemon,
    Fakes,
    process_cpu_seconds,
    worker_pids,
    write_home,
)

# A child that burns CPU, with the worker module's name on its command line.
BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
SLEEP = "import time\ntime.sleep(3)\n"


def test_the_home_asks_for_the_workers_and_spreads_its_bots(tmp_path: Path) -> None:
    write_home(
        tmp_path,
        bots=3,
        model_url="http://127.0.0.1:1/v1",
        telegram_urls=["http://127.0.0.1:2"] * 3,
        allowed_users=[5000],
        concurrent_turns=8,
        workers=2,
        spread=True,
    )
    home = Home(tmp_path)
    assert home.settings.daemon.workers == 2
    assert home.settings.dashboard.listen != "127.0.0.1:8765"  # a port of its own
    assert all(bot.settings.spread for bot in home.bots.values())
    write_home(
        tmp_path,
        bots=3,
        model_url="http://127.0.0.1:1/v1",
        telegram_urls=["http://127.0.0.1:2"] * 3,
        allowed_users=[5000],
        concurrent_turns=8,
    )
    home = Home(tmp_path)
    assert home.settings.daemon.workers is None
    assert not any(bot.settings.spread for bot in home.bots.values())


def test_the_daemons_environment_says_the_same_number_of_workers(tmp_path: Path) -> None:
    fakes = Fakes(bots=1, latency=0.0)
    assert fakes.env(tmp_path, workers=2)[WORKERS_ENV] == "2"
    # conftest.py sets ATLAS_WORKERS=1 for tests: without a number it is passed on unchanged
    assert fakes.env(tmp_path).get(WORKERS_ENV) == "1"


def test_worker_count_follows_the_config_when_the_environment_agrees(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write_home(
        tmp_path,
        bots=10,
        model_url="http://127.0.0.1:1/v1",
        telegram_urls=["http://127.0.0.1:2"] * 10,
        allowed_users=[5000],
        concurrent_turns=8,
        workers=2,
    )
    monkeypatch.delenv(WORKERS_ENV)
    assert worker_count(Home(tmp_path)) == 2


def daemon_running(code: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Daemon]:
    """A Python process running `code`, looked at as loadkit looks at a daemon."""
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    daemon = Daemon(tmp_path, {}, tmp_path / "log")
    daemon.process = parent
    return parent, daemon


def wait_for_a_worker(parent: subprocess.Popen[bytes], failure: str) -> float:
    """Until `parent` has a child loadkit counts as a worker; the deadline (10 s) it kept."""
    deadline = time.monotonic() + 10
    while not worker_pids(parent.pid):
        assert time.monotonic() < deadline, failure
        time.sleep(0.02)
    return deadline


def test_cpu_counts_live_worker_children_and_reaped_ones(tmp_path: Path) -> None:
    # A parent that starts a CPU-burning "worker" and sleeps: the parent's own utime stays
    # near 0; its live child's CPU is counted through worker_pids, then through cutime.
    parent_code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {BURN!r}, 'atlas.workers.child'])\n"
        f"other = subprocess.Popen([sys.executable, '-c', {SLEEP!r}, 'something.else'])\n"
        "time.sleep(1.5)\n"
        "child.wait()\n"
        "print('reaped', flush=True)\n"
        "time.sleep(30)\n"
    )
    parent, daemon = daemon_running(parent_code, tmp_path)
    try:
        deadline = wait_for_a_worker(parent, "the child did not start")
        (child,) = worker_pids(parent.pid)  # the other child is not a worker
        while process_cpu_seconds(child) < 0.3:
            assert time.monotonic() < deadline, "the child burnt no CPU"
            time.sleep(0.02)
        assert process_cpu_seconds(parent.pid) < 0.2
        assert daemon.cpu_seconds() >= 0.3  # the live child's, counted
        home, workers = daemon.cpu_split()
        assert home < 0.2 and workers >= 0.3
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"reaped\n"
        assert worker_pids(parent.pid) == []
        assert daemon.cpu_seconds() >= 0.35  # now in the parent's cutime
        assert daemon.memory_kb(every_process=True)["VmRSS"] > 0
    finally:
        parent.kill()
        parent.wait()


def test_a_forked_worker_is_found_by_its_name_and_its_shared_pages_counted_once(
    tmp_path: Path,
) -> None:
    # A forked worker keeps its parent's command line: only its name tells it apart.
    parent_code = (
        "import os, sys, time\n"
        "from atlas.process import name_this_process\n"
        "from atlas.workers.child import worker_process_name\n"
        "shared = b'x' * (64 * 1024 * 1024)  # pages both processes map after the fork\n"
        "if os.fork() == 0:\n"
        "    name_this_process(worker_process_name(1))\n"
        "    time.sleep(30)\n"
        "    os._exit(0)\n"
        "print('forked', flush=True)\n"
        "time.sleep(30)\n"
    )
    parent, daemon = daemon_running(parent_code, tmp_path)
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"forked\n"
        wait_for_a_worker(parent, "the forked child was not found by its name")
        memory = daemon.memory_kb(every_process=True)
        # The 64 MiB are in both processes' RSS, and once in their proportional shares.
        assert memory["Pss"] > 60 * 1024, memory
        assert memory["VmRSS"] - memory["Pss"] > 48 * 1024, memory
    finally:
        for pid in worker_pids(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
