"""Issue 32, limits: a fork bomb, a /tmp fill and a memory hog in one bot's sandbox stay there;
another bot's command still starts and succeeds, and this process (the daemon's stand-in) stays
up. Small limits in the test's config keep it fast. Real bwrap, real cgroups where the machine
has them (atlas/sandbox/limits.py)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.newbot import create_bot
from atlas.sandbox import limits
from atlas.tools.files import write_file
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.shell import jobs_for, run_command
from tests.helpers import BASE_CONFIG, make_home, run_context

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap: Linux")

SMALL = """
[sandbox]
max_processes = 64
max_memory_mb = 256
tmp_max_mb = 64
workspace_max_mb = 2
"""
FORK_BOMB = "bomb() { bomb | bomb & }; bomb; sleep 30"
NO_BOUND = limits.mechanism() == "rlimits"  # no pids or memory limit for root without cgroups


@pytest.fixture
async def home(tmp_path: Path) -> AsyncIterator[Home]:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + SMALL
    home = make_home(tmp_path / "home", config=config)
    create_bot(home, "other", "Other", "another bot")
    yield home
    await jobs_for(home).shutdown()


async def call(run: RunContext, **arguments: object) -> ToolResult:
    return await run_command.invoke(run, arguments)


@pytest.mark.skipif(NO_BOUND and os.geteuid() == 0, reason="no pids limit here: would hurt")
async def test_a_fork_bomb_and_a_tmp_fill_stay_in_their_sandbox(home: Home) -> None:
    bomber, other = run_context(home), run_context(home, bot="other")
    bomb = await call(bomber, command=FORK_BOMB, background=True, timeout=20)
    fill = await call(
        bomber, command="head -c 2600M /dev/zero | split -b 1M - /tmp/fill.; df -m /tmp", timeout=20
    )
    assert "No space left on device" in fill.text, fill.text
    await asyncio.sleep(0.5)  # the bomb has filled its process table by now
    for _ in range(3):
        answer = await call(
            other, command="echo still-here; ls /tmp/fill.* 2>/dev/null | wc -l", timeout=20
        )
        assert answer.text.startswith("still-here\n0"), answer.text
    job = jobs_for(home).get(re.search(r"job (\w+)", bomb.text).group(1))  # type: ignore[union-attr]
    assert job is not None  # running still, or ended by its own failed forks: either way bounded
    await jobs_for(home).stop(job.id)


@pytest.mark.skipif(NO_BOUND, reason="no memory limit without cgroups")
async def test_a_memory_hog_dies_not_the_daemon(home: Home) -> None:
    hog = "python3 -c \"b = b'x' * (600 * 2**20); print('survived')\""
    answer = await call(run_context(home), command=hog, timeout=30)
    assert "survived" not in answer.text and "[exit code 137]" in answer.text, answer.text
    answer = await call(run_context(home), command="echo fine", timeout=20)
    assert answer.text == "fine\n[exit code 0]"


async def test_tmp_and_shm_are_sized(home: Home) -> None:
    answer = await call(run_context(home), command="df -m /tmp /dev/shm | tail -2", timeout=20)
    sizes = [line.split()[1] for line in answer.text.splitlines()[:2]]
    assert sizes == ["64", "64"], answer.text


async def test_a_workspace_over_budget_refuses_writes(home: Home) -> None:
    run = run_context(home)
    refused = await write_file.invoke(run, {"path": "big.txt", "content": "x" * 3 * 2**20})
    assert refused.is_error and re.search(r"over its size budget.*= 2 MB", refused.text)
    answer = await call(run, command="head -c 3M /dev/zero > big; ls -l big", timeout=20)
    assert "File size limit exceeded" in answer.text, answer.text  # RLIMIT_FSIZE: the budget
    answer = await call(run, command="head -c 1500K /dev/zero > a; cp a b", timeout=20)
    assert "over its size budget" in answer.text, answer.text
    refused = await write_file.invoke(run, {"path": "small.txt", "content": "x"})
    assert refused.is_error and "over its size budget" in refused.text, refused.text
    await call(run, command="rm -f a b big", timeout=20)
    written = await write_file.invoke(run, {"path": "small.txt", "content": "x"})
    assert written.text.startswith("Created"), written.text
