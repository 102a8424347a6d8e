"""Leaving the sandbox is a person's choice every time; judging never blocks the event loop;
"allow for this conversation" covers the exact call or the scope the question named."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from atlas.providers.base import ToolCall
from atlas.tools.registry import RunContext, Tool
from atlas.tools.shell import run_command
from atlas.trust import rules
from atlas.trust.gate import (
    ALLOW_CONVERSATION,
    ALLOW_ONCE,
    DENY,
    Allow,
    Ask,
    BaseGate,
    Decision,
    Deny,
    settle,
)
from atlas.trust.policy import RuleGate
from tests.helpers import Person, make_home, run_context


@pytest.fixture
def run(home_path: Path) -> RunContext:
    return run_context(make_home(home_path))


async def judge(gate: BaseGate, run: RunContext, t: Tool, **args: object) -> Allow | Deny:
    return await settle(gate, ToolCall("c1", t.name, json.dumps(args)), t, run)


@pytest.mark.parametrize("mode", ["ask", "auto", "read-only"])
async def test_leaving_the_sandbox_is_asked_every_time_in_every_mode(
    run: RunContext, mode: str
) -> None:
    gate = RuleGate(run.home, None, None)
    run.state.mode = mode
    person = Person(ALLOW_CONVERSATION)  # even this answer does not make it stick
    run.ask = person
    command = "pip install --user requests && echo done"
    for _ in range(2):
        decision = await judge(gate, run, run_command, command=command, sandbox=False)
        assert isinstance(decision, Allow) and decision.rule == "sandbox:escape"
    assert len(person.asked) == 2 and not run.state.approvals
    question, choices = person.asked[0]
    assert command in question and "OUTSIDE the sandbox" in question and "git hooks" in question
    assert choices == [ALLOW_ONCE, DENY]
    sandboxed = await judge(gate, run, run_command, command=command)
    assert isinstance(sandboxed, Allow) and len(person.asked) == 2  # inside: not asked


async def test_nobody_to_ask_means_no_escape(run: RunContext) -> None:
    gate = RuleGate(run.home, None, None)
    run.state.mode = "auto"
    decision = await judge(gate, run, run_command, command="ls", sandbox=False)
    assert isinstance(decision, Deny) and decision.answered_by == "nobody"
    assert decision.rule == "sandbox:escape"


async def test_a_hardline_command_is_blocked_not_asked_outside_the_sandbox(
    run: RunContext,
) -> None:
    gate = RuleGate(run.home, None, None)
    person = Person(ALLOW_ONCE)
    run.ask = person
    command = "rm -rf --no-preserve-root /"
    decision = await judge(gate, run, run_command, command=command, sandbox=False)
    assert isinstance(decision, Deny) and decision.rule.startswith("hardline")
    assert not person.asked
    long_one = "echo " + "x" * 3000
    too_long = await judge(gate, run, run_command, command=long_one, sandbox=False)
    assert isinstance(too_long, Deny) and "shown whole" in too_long.reason and not person.asked


async def test_no_escape_question_when_the_sandbox_is_off(
    run: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RuleGate, "sandbox_enabled", False)  # [sandbox] enabled = false
    gate = RuleGate(run.home, None, None)
    person = Person(DENY)
    run.ask = person
    decision = await judge(gate, run, run_command, command="ls -la", sandbox=False)
    assert isinstance(decision, Allow) and not person.asked


async def test_judging_runs_off_the_loop_and_a_slow_judgment_is_asked(
    run: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    def slow_classify(command: str, **kwargs: object) -> object:
        time.sleep(1.0)  # a parse that takes too long (our own code, made slow)
        raise AssertionError("not waited for")

    monkeypatch.setattr(rules, "classify", slow_classify)
    gate = RuleGate(run.home, None, None)
    gate.judge_timeout = 0.2
    person = Person(ALLOW_CONVERSATION)
    run.ask = person
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(ticker())
    started = time.monotonic()
    decision = await judge(gate, run, run_command, command="ls")
    elapsed = time.monotonic() - started
    beat.cancel()
    assert isinstance(decision, Allow) and decision.rule == "opaque:timeout"
    assert elapsed < 0.8 and ticks >= 5  # the loop kept running while the judge thought
    question, choices = person.asked[0]
    assert "too complex to judge quickly" in question and choices == [ALLOW_ONCE, DENY]
    routine = run_context(run.home, kind="routine")
    denied = await judge(gate, routine, run_command, command="ls")
    assert isinstance(denied, Deny) and denied.rule == "opaque:timeout"


async def test_a_fault_in_the_rules_is_asked_never_allowed(
    run: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_classify(command: str, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", "/proc/1/root")

    monkeypatch.setattr(rules, "classify", broken_classify)
    person = Person(DENY)
    run.ask = person
    decision = await judge(RuleGate(run.home, None, None), run, run_command, command="ls")
    assert isinstance(decision, Deny) and decision.rule == "opaque:judge-error"
    assert "could not judge" in person.asked[0][0]


class ScopedGate(BaseGate):
    """Asks with a scope named in the question, as a rule may for a family of calls."""

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        return Ask("Delete recursively under ./build?", "dangerous:x", scope="deletes in ./build")


async def test_a_scope_the_person_saw_is_what_is_remembered(run: RunContext) -> None:
    person = Person(ALLOW_CONVERSATION)
    run.ask = person
    gate = ScopedGate()
    await judge(gate, run, run_command, command="rm -rf build/a")
    again = await judge(gate, run, run_command, command="rm -rf build/b")
    assert again.answered_by == "earlier approval" and len(person.asked) == 1
    assert "covers deletes in ./build" in person.asked[0][0]


async def test_bot_create_and_an_untrusted_servers_calls_are_asked_every_time(
    run: RunContext,
) -> None:
    from pydantic import BaseModel, ConfigDict

    from atlas.mcp.tools import McpTool
    from atlas.tools.catalog import default_registry

    class AnyArguments(BaseModel):
        model_config = ConfigDict(extra="allow")

    async def never_called(run: RunContext, **kwargs: object) -> str:
        raise AssertionError

    untrusted = McpTool(
        name="files_delete",
        description="",
        fn=never_called,
        arguments=AnyArguments,
        server="sketchy",
        ask_every_call=True,
    )
    bot_create = default_registry().get("bot_create")
    assert bot_create is not None
    gate = RuleGate(run.home, None, None)
    for t, args in (
        (untrusted, {"path": "/tmp/x"}),
        (bot_create, {"name": "helper", "title": "Helper", "description": "helps"}),
    ):
        person = Person(ALLOW_CONVERSATION)
        run.ask = person
        for _ in range(2):
            decision = await judge(gate, run, t, **args)
            assert isinstance(decision, Allow) and decision.answered_by == "user", t.name
        assert [choices for _, choices in person.asked] == [[ALLOW_ONCE, DENY]] * 2
    assert not run.state.approvals
