"""Issue 38: a sandbox ends when its command ends, however it was started, and when the process
that started it dies (SIGKILL too). Each test looks for what is left of the sandbox (bwrap, the
proxy bridge, the command's children) by the test's own temporary folder."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.shell import jobs_for, run_command
from tests.helpers import run_context
from tests.sandbox_leftovers import wait_until_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap: Linux")


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    yield run_context(home)
    await jobs_for(home).shutdown()


async def call(run: RunContext, **arguments: object) -> ToolResult:
    return await run_command.invoke(run, arguments)


def job_id(text: str) -> str:
    found = re.search(r"job (\w+)", text)
    assert found, text
    return found.group(1)


async def test_a_foreground_command_leaves_nothing(run: RunContext, tmp_path: Path) -> None:
    answer = await call(run, command="sleep 300 & echo hi", timeout=20)
    assert answer.text.startswith("hi"), answer.text
    assert wait_until_gone(str(tmp_path)) == []


@pytest.mark.parametrize("timeout", [None, 60_000])
async def test_a_background_job_that_ended_leaves_nothing(
    run: RunContext, tmp_path: Path, timeout: int | None
) -> None:
    """The issue's call: `echo hi` in background with a timeout; the bridge and a leftover
    `sleep &` must not keep the sandbox alive once the command has ended."""
    answer = await call(run, command="sleep 300 & echo hi", run_in_background=True, timeout=timeout)
    job = jobs_for(run.home).get(job_id(answer.text))
    assert job is not None and job.task is not None
    await job.task
    assert job.outcome is not None and job.outcome.startswith("[exit code 0"), job.outcome
    assert wait_until_gone(str(tmp_path)) == []


async def test_a_job_stopped_as_it_starts_leaves_nothing(run: RunContext, tmp_path: Path) -> None:
    """Stopped within milliseconds of its start (as `atlas tool` and a test's teardown do),
    before bwrap's --die-with-parent holds: it had left bwrap's pid 1 and the bridge forever."""
    table = jobs_for(run.home)
    for _ in range(8):
        answer = await call(run, command="sleep 300", run_in_background=True, timeout=60_000)
        await table.stop(job_id(answer.text))
    assert wait_until_gone(str(tmp_path)) == []


async def test_the_job_timeout_ends_the_whole_sandbox(run: RunContext, tmp_path: Path) -> None:
    answer = await call(run, command="setsid sleep 300 & sleep 300", background=True, timeout=1)
    job = jobs_for(run.home).get(job_id(answer.text))
    assert job is not None and job.task is not None
    await job.task
    assert job.outcome == "[killed after timeout 1s]"
    assert wait_until_gone(str(tmp_path)) == []


async def test_a_wait_that_times_out_leaves_nothing(run: RunContext, tmp_path: Path) -> None:
    answer = await call(run, command="sleep 300", until="false", interval=1, timeout=1)
    assert "check not passed" in answer.text or "Waiting" in answer.text, answer.text
    await jobs_for(run.home).shutdown()
    assert wait_until_gone(str(tmp_path)) == []


CHILD = """
import os, signal, sys, time
from pathlib import Path
from atlas.sandbox.launcher import SandboxPolicy, sandbox_argv
import subprocess
root = Path(sys.argv[1])
socket = root / "proxy.sock"
import socket as sockets
listener = sockets.socket(sockets.AF_UNIX)
listener.bind(str(socket))
listener.listen()
policy = SandboxPolicy(
    workspace=root / "ws", env={"PATH": "/usr/bin:/bin"}, proxy_socket=socket, readable=(root,)
)
argv = sandbox_argv(["bash", "-c", "sleep 300 & sleep 300"], policy, lifeline=True)
for delay in (0.0, 0.002, 0.005, 0.01, 0.05, 0.3):
    read, write = os.pipe()
    if os.fork() == 0:  # the starter: spawns a sandbox, then dies by SIGKILL
        subprocess.Popen(argv, stdin=read, start_new_session=True)
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGKILL)
    os.close(read)
    os.close(write)
    os.wait()
"""


def test_the_sandbox_ends_when_its_starter_is_killed(tmp_path: Path) -> None:
    """SIGKILL of the process that started it, at several moments of its start (before
    bwrap's --die-with-parent takes hold too): the lifeline's end ends the sandbox."""
    (tmp_path / "ws").mkdir()
    script = textwrap.dedent(CHILD)
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=60)
    assert wait_until_gone(str(tmp_path)) == []
    assert signal.SIGKILL  # the starters died by it (os.wait above reaped them)
