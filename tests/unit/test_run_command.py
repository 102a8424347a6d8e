"""run_command: output and exit codes, cwd, timeouts and cancellation killing the whole tree,
background jobs with their logs, notices, stop and shutdown."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.tools import shell
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.shell import SHELL_TOOLS, jobs_for, run_command
from tests.helpers import BASE_CONFIG, make_home, run_context


def tree(marker: str) -> str:
    """A tree of three processes: the shell, a child in the background and one in the
    foreground, both `sleep <marker>` so the test can find them from outside the sandbox (whose
    pids differ)."""
    return f"echo started; sleep {marker} & sleep {marker}; wait"


@pytest.fixture
def marker() -> str:
    return f"100.{secrets.randbelow(10**9):09d}"


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    yield run_context(home)
    await jobs_for(home).shutdown()  # no test leaves a job running


def live_with(marker: str) -> list[int]:
    """Processes whose command line holds `marker`, still alive (zombies are dead)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # exited while we looked
        if marker.encode() in cmdline.split(b"\0") and state != "Z":
            pids.append(int(entry.name))
    return pids


async def assert_tree_gone(marker: str) -> None:
    """Signals are delivered at once, but a killed process takes a moment to finish exiting
    (longer on a loaded machine: up to 10 s is allowed; a passing run takes milliseconds)."""
    for _ in range(500):
        if not live_with(marker):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"processes of {marker} survived: {live_with(marker)}")


async def wait_for_tree(marker: str, size: int = 2) -> None:
    for _ in range(500):  # until both sleeps have started
        if len(live_with(marker)) >= size:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the tree of {marker} never grew: {live_with(marker)}")


async def call(run: RunContext, **arguments: object) -> ToolResult:
    return await run_command.invoke(run, arguments)


def job_id_of(answer: str) -> str:
    match = re.search(r"background job (\w+) \(pid \d+\)", answer)
    assert match, answer
    return match.group(1)


async def finished_log(run: RunContext, job_id: str) -> list[str]:
    job = jobs_for(run.home).get(job_id)
    assert job is not None and job.task is not None
    await asyncio.wait_for(job.task, 10)
    return job.log_path.read_text().splitlines()


def test_exported() -> None:
    assert [run_command] == SHELL_TOOLS
    assert run_command.name == "run_command"


async def test_output_and_exit_code(run: RunContext) -> None:
    result = await call(run, command="echo hello; echo world")
    assert not result.is_error
    assert result.text == "hello\nworld\n[exit code 0]"


async def test_stderr_is_merged_and_failure_is_output(run: RunContext) -> None:
    result = await call(run, command="echo out; echo err >&2; exit 3")
    assert not result.is_error  # the model reads a failing command's output, it is no tool error
    assert result.text == "out\nerr\n[exit code 3]"


async def test_empty_output_says_so(run: RunContext) -> None:
    result = await call(run, command="true")
    assert result.text == "(no output)\n[exit code 0]"


async def test_stdin_is_closed(run: RunContext) -> None:
    result = await call(run, command="cat; echo done", timeout=5)
    assert result.text == "done\n[exit code 0]"


async def test_pagers_and_colours_off(run: RunContext) -> None:
    result = await call(run, command="echo $PAGER $GIT_PAGER $MANPAGER $NO_COLOR $TERM")
    assert result.text.splitlines()[0] == "cat cat cat 1 dumb"


async def test_cwd_defaults_to_workspace(run: RunContext) -> None:
    result = await call(run, command="pwd -P")
    assert result.text.splitlines()[0] == str(run.bot.workspace.resolve())


async def test_relative_cwd_resolves_against_workspace(run: RunContext) -> None:
    (run.bot.workspace / "sub").mkdir(parents=True)
    result = await call(run, command="pwd -P", cwd="sub")
    assert result.text.splitlines()[0] == str((run.bot.workspace / "sub").resolve())


async def test_missing_cwd_refused(run: RunContext) -> None:
    result = await call(run, command="pwd", cwd="nowhere")
    assert result.is_error
    assert "nowhere does not exist" in result.text


@pytest.mark.parametrize("timeout", [0, 601])
async def test_timeout_out_of_range_refused(run: RunContext, timeout: int) -> None:
    result = await call(run, command="true", timeout=timeout)
    assert result.is_error
    assert "between 1 and 600" in result.text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"command": "true", "stop": "abc"}, "not both"),
        ({}, "give a command"),
        ({"command": "true", "notify_on_complete": True}, "needs background=true"),
    ],
)
async def test_refusals(run: RunContext, arguments: dict[str, object], message: str) -> None:
    result = await call(run, **arguments)
    assert result.is_error
    assert message in result.text


async def test_timeout_kills_the_whole_tree(run: RunContext, marker: str) -> None:
    result = await call(run, command=tree(marker), timeout=1)
    assert result.text == "started\n[killed after timeout 1s]"
    await assert_tree_gone(marker)


async def test_cancellation_kills_the_whole_tree(run: RunContext, marker: str) -> None:
    task = asyncio.create_task(call(run, command=tree(marker)))
    await wait_for_tree(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_tree_gone(marker)


async def test_output_is_capped(run: RunContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "OUTPUT_CAP", 1000)
    result = await call(run, command="head -c 5000 /dev/zero | tr '\\0' a")
    lines = result.text.splitlines()
    assert lines[0] == "a" * 1000
    assert "1,000 bytes kept, 4,000 more dropped" in lines[1]
    assert lines[-1] == "[exit code 0]"


async def test_background_job_logs_how_it_ended(run: RunContext) -> None:
    answer = (await call(run, command="echo hello; exit 3", background=True)).text
    job_id = job_id_of(answer)
    log_path = run.home.root / "commands" / f"{job_id}.log"  # the reference's folder
    assert str(log_path) in answer
    lines = await finished_log(run, job_id)
    assert lines[0] == "hello"
    assert re.fullmatch(r"\[exit code 3 after \d+\.\ds\]", lines[-1])


async def test_background_job_has_no_timeout_unless_given(run: RunContext, marker: str) -> None:
    job_id = job_id_of((await call(run, command="sleep 1.5; echo late", background=True)).text)
    lines = await finished_log(run, job_id)
    assert lines[0] == "late"  # outlived nothing: no default timeout in the background
    timed = job_id_of((await call(run, command=tree(marker), background=True, timeout=1)).text)
    assert (await finished_log(run, timed))[-1] == "[killed after timeout 1s]"
    await assert_tree_gone(marker)


async def test_notify_on_complete(run: RunContext) -> None:
    notices: list[str] = []

    async def collect(text: str) -> None:
        notices.append(text)

    run.notify = collect
    command = "for i in $(seq 1 30); do echo line$i; done"
    answer = (await call(run, command=command, background=True, notify_on_complete=True)).text
    job_id = job_id_of(answer)
    await finished_log(run, job_id)
    assert len(notices) == 1
    notice = notices[0]
    assert job_id in notice and "[exit code 0 after" in notice
    assert "line30" in notice and "line11\n" in notice
    assert "line10\n" not in notice  # only the last 20 lines


async def test_stop_by_id(run: RunContext, marker: str) -> None:
    notices: list[str] = []

    async def collect(text: str) -> None:
        notices.append(text)

    run.notify = collect
    answer = (await call(run, command=tree(marker), background=True, notify_on_complete=True)).text
    job_id = job_id_of(answer)
    await wait_for_tree(marker)
    result = await call(run, stop=job_id)
    assert not result.is_error
    assert f"Job {job_id} stopped: [stopped]" in result.text
    assert "started" in result.text
    assert (run.home.jobs_dir / f"{job_id}.log").read_text().splitlines()[-1] == "[stopped]"
    await assert_tree_gone(marker)
    assert notices == []  # `stop` answered already; no second notice
    again = await call(run, stop=job_id)
    assert "had already ended: [stopped]" in again.text


async def test_unknown_job_id_lists_running_ones(run: RunContext) -> None:
    job_id = job_id_of((await call(run, command="sleep 100", background=True)).text)
    result = await call(run, stop="nope")
    assert result.is_error
    assert "'nope'" in result.text and f"running jobs: {job_id}" in result.text


async def test_shutdown_kills_running_jobs(run: RunContext) -> None:
    table = jobs_for(run.home)
    markers = [f"100.{secrets.randbelow(10**9):09d}" for _ in range(2)]
    ids = [job_id_of((await call(run, command=tree(m), background=True)).text) for m in markers]
    for m in markers:
        await wait_for_tree(m)
    await table.shutdown()
    assert table.running() == []
    for job_id, m in zip(ids, markers, strict=True):
        assert (run.home.jobs_dir / f"{job_id}.log").read_text().splitlines()[-1] == "[stopped]"
        await assert_tree_gone(m)


async def test_escaped_children_end_with_their_command(run: RunContext, marker: str) -> None:
    """setsid, nohup and a double fork leave the process group, not the sandbox."""
    command = (
        f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & "
        f"(sleep {marker} &) ; sleep 0.3; echo hi"
    )
    result = await call(run, command=command, timeout=10)
    assert result.text == "hi\n[exit code 0]"  # nothing holds the output: they are gone
    await assert_tree_gone(marker)


async def test_unsandboxed_leftover_background_process_does_not_block(
    home_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str
) -> None:
    """With `[sandbox] enabled = false` commands run as before: `cmd &` keeps running."""
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[sandbox]\nenabled = false\n"
    run = run_context(make_home(home_path, config=config))
    monkeypatch.setattr(shell, "DRAIN_SECONDS", 0.2)
    result = await call(run, command=f"echo $$ > pgid; sleep {marker} & echo hi", timeout=10)
    pgid = int((run.bot.workspace / "pgid").read_text())
    try:
        lines = result.text.splitlines()
        assert lines[0] == "hi"
        assert "still holds the output" in lines[1]
        assert lines[-1] == "[exit code 0]"
        assert live_with(marker)  # left running on purpose: `cmd &` means "keep it going"
    finally:
        os.killpg(pgid, signal.SIGKILL)


async def test_stopping_a_job_ends_what_escaped_it(run: RunContext, marker: str) -> None:
    command = f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & sleep {marker}"
    job_id = job_id_of((await call(run, command=command, background=True)).text)
    await wait_for_tree(marker, size=3)
    await call(run, stop=job_id)
    await assert_tree_gone(marker)
