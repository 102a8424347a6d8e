"""The loop guards through the tool loop: the same failure from near-identical arguments is
counted as one, failure-tolerant tools (run_command among them) are warned and never halted,
and a call the gate denies halts even a failure-tolerant tool."""

from __future__ import annotations

import json
from typing import Any

import pytest

from atlas.agent.guards import RepeatGuard, normalise_arguments
from atlas.agent.loop import ToolLoop
from atlas.errors import ToolError
from atlas.providers.base import Message, ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.store.conversations import ConversationStore
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext, Tool, ToolRegistry, tool
from atlas.tools.shell import _command_failed
from atlas.trust.gate import BaseGate, Decision, Deny, OpenGate
from tests.helpers import run_context


@tool()
async def fetch_report(run: RunContext, path: str, retries: int = 0) -> str:
    """Always refused by the same backend, whatever the path."""
    raise ToolError("the report service refused the request (503)")


@tool()
async def open_named(run: RunContext, path: str) -> str:
    """Fails with an error that names the path."""
    raise ToolError(f"{path}: no such file")


@tool(failure_tolerant=True)
async def probe(run: RunContext, url: str) -> str:
    """Fails for outside reasons."""
    raise ToolError("connection refused")


class DenyAll(BaseGate):
    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        return Deny("not today")


@pytest.fixture
async def store(home):
    s = ConversationStore(home.bot(None).db_path)
    await s.open()
    yield s
    await s.close()


async def turn(home, store, registry, calls: list[tuple[str, dict[str, Any]]], gate=None):  # type: ignore[no-untyped-def]
    """One turn in which the model makes each call in its own round, then answers "gave up"
    (unless a guard halts it first); returns the outcome and the tool results."""
    conversation = await store.conversation("console", "guards", bot="atlas")
    await store.append(conversation.id, Message("user", "go"))
    model = ScriptedModel(*[Reply(calls=[c]) for c in calls], Reply("gave up"))
    loop = ToolLoop(model, registry, gate or OpenGate(), store)
    outcome = await loop.run(run_context(home, conversation_id=conversation.id))
    results = [m.content for m in await store.history(conversation.id) if m.role == "tool"]
    return outcome, results


TEST_TOOLS = ToolRegistry([fetch_report, open_named, probe])


def test_arguments_are_normalised() -> None:
    same = [
        '{"path": "src/", "retries": null}',
        '{"path":"src"}',
        '{ "path": "  src " }',
    ]
    assert len({normalise_arguments(a) for a in same}) == 1
    assert normalise_arguments('{"b": 1, "a": "x  y"}') == normalise_arguments('{"a":"x y","b":1}')
    assert normalise_arguments('{"path": "/"}') == '{"path": "/"}'  # the root stays the root
    assert normalise_arguments('{"path": "a"}') != normalise_arguments('{"path": "b"}')


def test_long_arguments_are_compared_only_when_equal() -> None:
    guard = RepeatGuard()
    for letter in "abc":  # a file's content, one letter apart: not compared letter by letter
        content = json.dumps({"path": "f.txt", "content": "x" * 50_000 + letter})
        assert guard.record_failure("write_file", content, "Error: disk full", tolerant=False) == ""
    assert guard.halted is None


@pytest.mark.parametrize(
    "arguments",
    [
        # equal once normalised: a trailing slash, spaces, a null
        [{"path": "reports/"}, {"path": "reports"}, {"path": " reports ", "retries": None}],
        # only a number differs, and the error is the same
        [{"path": "log1.txt"}, {"path": "log2.txt"}, {"path": "log3.txt"}],
        # near-identical (difflib), and the error is the same
        [
            {"path": "reports/2026/summary-final.txt"},
            {"path": "reports/2026/summary_final.txt"},
            {"path": "reports/2026/summary.final.txt"},
        ],
    ],
    ids=["normalised", "number", "near"],
)
async def test_near_identical_failing_calls_warn_then_halt(home, store, arguments) -> None:
    calls = [("fetch_report", a) for a in arguments]
    outcome, results = await turn(home, store, TEST_TOOLS, calls)
    assert outcome.halted and "fetch_report failed 3 times the same way" in outcome.text
    assert "Warning" not in results[0] and "Warning: this call has now failed 2 times" in results[1]


async def test_different_failures_are_not_counted_together(home, store) -> None:
    calls = [("open_named", {"path": name}) for name in ("a.txt", "b.txt", "c.txt")]
    outcome, results = await turn(home, store, TEST_TOOLS, calls)
    assert not outcome.halted and outcome.text == "gave up"
    assert not any("Warning" in r for r in results)  # each error names another file


async def test_a_failure_tolerant_tool_is_warned_and_never_halted(home, store) -> None:
    calls = [("probe", {"url": f"http://localhost:{port}/"}) for port in (8000, 8001, 8002, 8003)]
    outcome, results = await turn(home, store, TEST_TOOLS, calls)
    assert not outcome.halted and outcome.text == "gave up"
    assert "Note: probe has now failed" not in results[0]
    assert all("Note: probe has now failed" in r for r in results[1:])
    assert "failed 4 times the same way" in results[3]


async def test_run_command_is_failure_tolerant(home, store) -> None:
    registry = default_registry()
    assert registry.get("run_command").failure_tolerant  # type: ignore[union-attr]
    calls = [("run_command", {"command": "sleep 1", "timeout": t}) for t in (900, 901, 998, 999)]
    outcome, results = await turn(home, store, registry, calls)
    assert not outcome.halted and outcome.text == "gave up"
    assert results[0].startswith("Error: timeout must be between 1 and 600 seconds")
    assert "Note: run_command has now failed 4 times the same way" in results[3]


async def test_a_denied_call_halts_even_a_failure_tolerant_tool(home, store) -> None:
    calls = [("run_command", {"command": f"curl http://example.com/{n}"}) for n in (1, 2, 3)]
    outcome, results = await turn(home, store, default_registry(), calls, gate=DenyAll())
    assert outcome.halted and "run_command failed 3 times" in outcome.text
    assert "Warning" in results[1]


async def test_a_command_that_exits_non_zero_is_a_failure_the_guard_sees(home, store) -> None:
    failing = ("run_command", {"command": "ls no-such-file-here"})
    calls = [failing, ("run_command", {"command": "echo fine"}), failing, failing]
    outcome, results = await turn(home, store, default_registry(), calls)
    assert not outcome.halted and outcome.text == "gave up"  # tolerant: never halted
    assert "[exit code 2]" in results[0] and "Note:" not in results[0]
    assert results[1].startswith("fine") and "Note:" not in results[1]
    assert "Note: run_command has now failed 2 times the same way" in results[2]
    assert "failed 3 times the same way" in results[3]


async def test_a_command_rerun_with_another_outcome_is_not_the_same_failure(home, store) -> None:
    # Each run prints more lines: the same command, failing differently, as after a fix.
    growing = ("run_command", {"command": "echo x >> grows.txt; cat grows.txt; exit 1"})
    outcome, results = await turn(home, store, default_registry(), [growing] * 3)
    assert not outcome.halted
    assert all("[exit code 1]" in r and "Note:" not in r for r in results)


@pytest.mark.parametrize(
    ("output", "failed"),
    [
        ("ok\n[exit code 0]", False),
        ("[exit code 0]\n[exit code 1]", True),
        ("no\n[exit code 2]\nThe sandbox stopped it: hint", True),
        ("partial\n[killed after timeout 5s]", True),
        ("Started background job j1 (pid 5) in /w.", False),
    ],
)
def test_which_command_outputs_are_failures(output: str, failed: bool) -> None:
    assert _command_failed(output) is failed
