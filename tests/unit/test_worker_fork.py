"""atlas/workers/fork.py: when the home's process may fork its workers, what it imports first,
and how the pool waits for and kills a forked worker on the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from atlas.workers.fork import ForkedProcess, can_fork
from scripts.loadkit import write_home


def fork_exiting(code: int) -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(code)  # nothing else: this test's process may have threads
    return pid


def fork_waiting() -> int:
    pid = os.fork()
    if pid == 0:
        while True:
            signal.pause()
    return pid


async def test_every_waiter_gets_the_exit_code_and_the_process_is_reaped() -> None:
    process = ForkedProcess(fork_exiting(3))
    assert process.returncode is None
    first, second = await asyncio.wait_for(asyncio.gather(process.wait(), process.wait()), 10)
    assert (first, second, process.returncode) == (3, 3, 3)
    assert await process.wait() == 3  # and again, once reaped
    assert not Path(f"/proc/{process.pid}").exists(), "no zombie left"


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    process = ForkedProcess(fork_waiting())
    cancelled = asyncio.create_task(process.wait())
    other = asyncio.create_task(process.wait())
    await asyncio.sleep(0.05)
    cancelled.cancel()
    await asyncio.sleep(0.05)
    process.kill()
    assert await asyncio.wait_for(other, 10) == -signal.SIGKILL
    process.kill()  # ended: a second kill does nothing


def test_no_fork_while_another_thread_runs() -> None:
    assert can_fork() == (threading.active_count() == 1)
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert not can_fork()
    finally:
        release.set()
        thread.join()


def test_the_home_imports_the_channel_library_and_model_sdk_its_bots_use(tmp_path: Path) -> None:
    """In a fresh interpreter: aiogram and the OpenAI SDK (a Telegram bot on an OpenAI-style
    provider), not Slack's or Anthropic's, which no bot uses, nor what waits for a first use."""
    root = tmp_path / "home"
    write_home(
        root,
        bots=1,
        model_url="http://127.0.0.1:9/v1",
        telegram_urls=["http://127.0.0.1:9"],
        allowed_users=[1],
        concurrent_turns=1,
    )
    code = (
        "import json, sys\n"
        "from pathlib import Path\nfrom atlas.home import Home\n"
        "from atlas.start_checks import known_tool_names\n"
        "from atlas.workers.fork import import_what_the_bots_use\n"
        f"home = Home(Path({str(root)!r}))\n"
        "known_tool_names()\n"  # as the start checks do: every tool's module
        "import_what_the_bots_use(home)\n"
        "from atlas.trust.threats import _patterns\n"
        "compiled = _patterns.cache_info().currsize\n"
        "print(json.dumps([[m for m in sys.argv[1:] if m in sys.modules], compiled]))\n"
    )
    wanted = ["aiogram", "openai", "atlas.workers.share", "atlas.tools.shell"]
    # Loaded by their first use, not by every start: what no bot uses, and what a first answer
    # does not need (the gate's command rules and shell grammar, the sandbox's network proxy,
    # the routine scheduler; the injection patterns are compiled by the first scan).
    unwanted = ["slack_bolt", "anthropic", "atlas.trust.rules", "tree_sitter"]
    unwanted += ["atlas.sandbox.proxy", "atlas.routines.scheduler", "apscheduler.schedulers"]
    done = subprocess.run(
        [sys.executable, "-c", code, *wanted, *unwanted],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [wanted, 0]
