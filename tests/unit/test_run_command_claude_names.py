"""run_command takes Claude Code's Bash arguments: `run_in_background`, `description`, and
`timeout` in milliseconds when the call has Claude Code's shape or the value is that large.
They are accepted, not advertised (the schema stays ours)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from atlas.errors import ToolError
from atlas.home import Home
from atlas.tools.command_wait import timeout_seconds
from atlas.tools.registry import RunContext, ToolResult
from atlas.tools.shell import jobs_for, run_command
from tests.helpers import run_context


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    yield run_context(home)
    await jobs_for(home).shutdown()


async def call(run: RunContext, **arguments: object) -> ToolResult:
    return await run_command.invoke(run, arguments)


@pytest.mark.parametrize(
    ("timeout", "claude_shape", "seconds"),
    [
        (None, True, None),
        (120, False, 120),  # ours: seconds
        (600, False, 600),
        (1000, False, 1),  # no seconds value is this large: milliseconds
        (120_000, False, 120),
        (600_000, False, 600),
        (1500, True, 2),  # rounded up: never shorter than asked
        (30, True, 1),  # Claude Code's shape: milliseconds even when small
    ],
)
def test_timeout_units(timeout: int | None, claude_shape: bool, seconds: int | None) -> None:
    assert timeout_seconds(timeout, claude_shape=claude_shape, maximum=600) == seconds


@pytest.mark.parametrize(("timeout", "claude_shape"), [(601, False), (600_001, True), (0, True)])
def test_timeouts_out_of_range(timeout: int, claude_shape: bool) -> None:
    with pytest.raises(ToolError, match="600"):
        timeout_seconds(timeout, claude_shape=claude_shape, maximum=600)


async def test_milliseconds_reach_the_command(run: RunContext) -> None:
    result = await call(run, command="sleep 5", description="Wait a while", timeout=1000)
    assert result.text.endswith("[killed after timeout 1s]"), result.text
    plain = await call(run, command="sleep 5", timeout=1200)  # our shape, but over 600
    assert plain.text.endswith("[killed after timeout 2s]"), plain.text


async def test_run_in_background_and_description(run: RunContext) -> None:
    answer = await call(
        run, command="echo hi", run_in_background=True, description="Say hi", timeout=60_000
    )
    assert not answer.is_error, answer.text
    match = re.search(r"Started background job (\w+) \(Say hi\) \(pid \d+\)", answer.text)
    assert match, answer.text
    job = jobs_for(run.home).get(match.group(1))
    assert job is not None and job.timeout == 60 and job.description == "Say hi"


async def test_the_description_comes_with_the_notice(run: RunContext) -> None:
    notices: list[str] = []

    async def collect(text: str) -> None:
        notices.append(text)

    run.notify = collect
    answer = await call(
        run, command="true", background=True, notify_on_complete=True, description="Nothing"
    )
    job_id = re.search(r"job (\w+)", answer.text).group(1)  # type: ignore[union-attr]
    job = jobs_for(run.home).get(job_id)
    assert job is not None and job.task is not None
    await job.task
    assert notices[0].startswith(f"Background job {job_id} (Nothing) ended: [exit code 0")


def test_claude_names_are_not_in_the_schema() -> None:
    properties = run_command.spec().parameters["properties"]
    assert not {"description", "run_in_background"} & set(properties)
