"""run_command's `until`: a check polled in the background (in the sandbox) until it passes or
its timeout; the conversation is then woken by a notice, through the dispatcher as a background
job's end wakes it. The check passes the approval gate with the command."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import pytest

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.command_wait import check_loop
from atlas.tools.registry import RunContext, ToolRegistry, ToolResult
from atlas.tools.shell import jobs_for, run_command
from atlas.trust.gate import Deny
from atlas.trust.policy import RuleGate
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

ADDRESS = Address("atlas", "test", "chat-1", user="u1")


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    yield run_context(home)
    await jobs_for(home).shutdown()


async def call(run: RunContext, **arguments: object) -> ToolResult:
    return await run_command.invoke(run, arguments)


def wait_id(answer: str) -> str:
    match = re.search(r"Waiting \(job (\w+)\)", answer)
    assert match, answer
    return match.group(1)


async def ended(run: RunContext, job_id: str) -> str:
    job = jobs_for(run.home).get(job_id)
    assert job is not None and job.task is not None
    await asyncio.wait_for(asyncio.shield(job.task), 20)
    assert job.outcome is not None
    return job.outcome


def collecting(run: RunContext) -> list[str]:
    notices: list[str] = []

    async def collect(text: str) -> None:
        notices.append(text)

    run.notify = collect
    return notices


async def test_the_check_is_polled_until_it_passes_then_a_notice(run: RunContext) -> None:
    notices = collecting(run)
    answer = await call(run, until="test -f ready", interval=1, timeout=30)
    assert not answer.is_error, answer.text
    job_id = wait_id(answer.text)
    await asyncio.sleep(1.2)
    assert notices == []  # still waiting: the check fails until the file exists
    (run.bot.workspace / "ready").touch()
    assert (await ended(run, job_id)).startswith("[check passed after ")
    (notice,) = notices
    assert notice.startswith(f"Wait {job_id} is over: [check passed after ")
    assert "until: test -f ready" in notice
    log = (run.home.jobs_dir / f"{job_id}.log").read_text().splitlines()
    assert log[0] == "[check 1 at 0s: exit 1]" and log[-2].endswith("exit 0]")


async def test_a_check_that_never_passes_times_out_with_a_notice(run: RunContext) -> None:
    notices = collecting(run)
    job_id = wait_id((await call(run, until="echo not yet; false", interval=1, timeout=2)).text)
    assert await ended(run, job_id) == "[check not passed within the timeout of 2s]"
    (notice,) = notices
    assert "is over: [check not passed within the timeout of 2s]" in notice
    assert "not yet" in notice  # the last checks' output comes with it


async def test_with_a_command_it_starts_beside_it_and_gives_up_when_it_ends(
    run: RunContext,
) -> None:
    notices = collecting(run)
    answer = await call(run, command="touch built; sleep 5", until="test -f built", interval=1)
    assert "Started background job" in answer.text and "Waiting (job" in answer.text
    assert (await ended(run, wait_id(answer.text))).startswith("[check passed after ")
    failing = await call(run, command="echo crash; exit 3", until="test -f never", interval=1)
    job_id = wait_id(failing.text)
    outcome = await ended(run, job_id)
    assert re.fullmatch(
        r"\[check not passed: its command \(job \w+\) ended first: \[exit code 3 after .*\]\]",
        outcome,
    )
    assert len(notices) == 2 and "Beside background job" in notices[1]


async def test_a_wait_is_stopped_by_its_id(run: RunContext) -> None:
    notices = collecting(run)
    job_id = wait_id((await call(run, until="false", interval=1)).text)
    result = await call(run, stop=job_id)
    assert f"Job {job_id} stopped: [stopped]" in result.text
    assert notices == []  # `stop` said it


async def test_no_notice_can_reach_the_run_so_it_waits_here(run: RunContext) -> None:
    (run.bot.workspace).mkdir(parents=True, exist_ok=True)
    (run.bot.workspace / "ready").touch()
    result = await call(run, until="test -f ready")
    assert re.match(r"Wait \w+: \[check passed after \d+\.\ds\]", result.text), result.text
    assert not result.failed
    never = await call(run, until="false", interval=1, timeout=1)
    assert "[check not passed within the timeout of 1s]" in never.text
    assert never.failed and not never.is_error  # a failure the loop guards count


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"until": "  "}, "until is empty"),
        ({"until": "true", "stop": "abc"}, "not both"),
        ({"until": "true", "interval": 0}, "interval"),
        ({"until": "true", "timeout": 700}, "between 1 and 600"),
    ],
)
async def test_refusals(run: RunContext, arguments: dict[str, object], message: str) -> None:
    result = await call(run, **arguments)
    assert result.is_error and message in result.text, result.text


def test_the_check_is_quoted_into_its_loop() -> None:
    loop = check_loop("test -f 'a b'; echo \"$HOME\"", 3)
    assert "bash -c 'test -f '\"'\"'a b'\"'\"'; echo \"$HOME\"'" in loop
    assert loop.endswith("sleep 3; done")


def test_schema_offers_until_and_interval() -> None:
    properties = run_command.spec().parameters["properties"]
    assert {"until", "interval"} <= set(properties)


# ---- through the dispatcher, with a scripted model and the real gate ---------------------------


def gated_home(root, deny: str = "") -> Home:  # type: ignore[no-untyped-def]
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    return make_home(root, config=config + f"\n[trust]\nask_timeout = 0.3\ndeny = [{deny}]\n")


async def test_the_notice_wakes_the_conversation(home_path) -> None:  # type: ignore[no-untyped-def]
    home = gated_home(home_path)
    until = {"until": "test -f ready", "interval": 1, "timeout": 30}
    model = ScriptedModel(
        Reply(calls=[("run_command", until)]),
        Reply("I will wait for the file."),
        Reply("The file is there."),
    )
    runtime = Runtime(home, model=model, registry=ToolRegistry([run_command]))
    channel = RecordingChannel()
    dispatcher = Dispatcher(runtime, {"test": channel})
    try:
        await dispatcher.submit(Inbound(ADDRESS, "tell me when ready exists"))
        await dispatcher.wait_idle(ADDRESS)
        assert channel.texts(ADDRESS) == ["I will wait for the file."]
        tool_answer = model.requests[1].messages[-1].content
        job_id = wait_id(tool_answer)
        (home.bot(None).workspace / "ready").touch()
        job = jobs_for(home).get(job_id)
        assert job is not None and job.task is not None
        await asyncio.wait_for(asyncio.shield(job.task), 20)
        for _ in range(200):  # the notice's turn
            if len(channel.texts(ADDRESS)) == 2:
                break
            await asyncio.sleep(0.05)
        await dispatcher.wait_idle(ADDRESS)
        assert channel.texts(ADDRESS)[-1] == "The file is there."
        woken = model.requests[2].messages[-1].content
        assert woken.startswith(f"[notice] Wait {job_id} is over: [check passed after ")
        model.assert_complete()
    finally:
        await jobs_for(home).shutdown()
        await dispatcher.shutdown()
        await runtime.close()


async def test_a_check_the_gate_would_deny_alone_is_denied(home_path) -> None:  # type: ignore[no-untyped-def]
    home = gated_home(home_path, deny='"touch *"')
    gate = RuleGate(home, None, None)
    run = run_context(home)
    for arguments in ({"until": "touch made"}, {"command": "true", "until": "touch made"}):
        raw = json.dumps(arguments)
        decision = await gate.decide(ToolCall("c1", "run_command", raw), run_command, run)
        assert isinstance(decision, Deny) and "touch *" in decision.rule
    model = ScriptedModel(
        Reply(calls=[("run_command", {"command": "true", "until": "touch made"})]),
        Reply("denied"),
    )
    runtime = Runtime(home, model=model, registry=ToolRegistry([run_command]))
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel()})
    try:
        await dispatcher.submit(Inbound(ADDRESS, "go"))
        await dispatcher.wait_idle(ADDRESS)
        answer = model.requests[1].messages[-1].content
        assert "the approval gate denied this call" in answer
        assert jobs_for(home).running() == []
        assert not (home.bot(None).workspace / "made").exists()
    finally:
        await dispatcher.shutdown()
        await runtime.close()
