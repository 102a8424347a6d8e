"""plan: replace and merge, one item in progress, parents, the text form, rebuilt after a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from atlas.home import Home
from atlas.providers.base import Message, ToolCall
from atlas.tools.plan import Todo, carried_plan, parse_plan, plan, render
from atlas.tools.registry import RunContext
from tests.helpers import close_test_stores, open_store_for_tests, run_context


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    ctx = run_context(home)
    ctx.open_store = open_store_for_tests
    yield ctx
    await close_test_stores()


async def call(run: RunContext, **arguments: object):  # type: ignore[no-untyped-def]
    return await plan.invoke(run, arguments)


THREE = [
    {"id": "1", "content": "Read the docs", "status": "completed"},
    {"id": "2", "content": "Write the client", "status": "in_progress"},
    {"id": "2.1", "content": "Tests for the client", "parent": "2"},
]


def test_plan_is_deferred_and_carried() -> None:
    assert plan.deferred and plan.carried


async def test_no_arguments_reads_the_plan(run: RunContext) -> None:
    assert (await call(run)).text == "Plan (empty)."
    await call(run, todos=THREE)
    assert (await call(run)).text == (
        "Plan (1/3 completed, 1 in progress):\n"
        "[x] 1: Read the docs\n"
        "[>] 2: Write the client\n"
        "  [ ] 2.1: Tests for the client"
    )


async def test_merge_updates_by_id_and_keeps_the_rest(run: RunContext) -> None:
    await call(run, todos=THREE)
    result = await call(
        run,
        merge=True,
        todos=[
            {"id": "2", "status": "completed"},
            {"id": "2.1", "status": "in_progress"},
            {"id": 3, "content": "Ship\nit"},
        ],
    )
    assert not result.is_error, result.text
    assert result.text.splitlines()[1:] == [
        "[x] 1: Read the docs",
        "[x] 2: Write the client",
        "  [>] 2.1: Tests for the client",
        "[ ] 3: Ship it",
    ]
    replaced = await call(run, todos=[{"id": "a", "content": "Start over"}])
    assert replaced.text == "Plan (0/1 completed, 0 in progress):\n[ ] a: Start over"
    cleared = await call(run, todos=[])
    assert cleared.text == "Plan (empty)."


@pytest.mark.parametrize(
    ("todos", "merge", "expected"),
    [
        (
            [
                {"id": "a", "content": "x", "status": "in_progress"},
                {"id": "b", "content": "y", "status": "in_progress"},
            ],
            False,
            "2 items in progress (a, b); one at a time",
        ),
        ([{"id": "2", "status": "in_progress"}], True, "2 items in progress (2, 2.1)"),
        ([{"id": "new"}], True, "item new is new: give its content"),
        ([{"id": "a", "content": "x"}, {"id": "a", "content": "y"}], False, "repeated: a"),
        ([{"id": "a", "content": "x", "parent": "zz"}], False, "parent 'zz' is not in the plan"),
        ([{"id": "a", "content": "x", "parent": "a"}], False, "cannot be its own parent"),
        ([{"id": "2", "parent": "2.1"}], True, "its parents form a loop"),
        ([{"id": "a b", "content": "x"}], False, "invalid arguments for plan: todos.0.id"),
        ([{"id": "a", "content": "x", "status": "done"}], False, "todos.0.status"),
        ([{"id": "a", "content": "x" * 201}], False, "content over 200 characters"),
    ],
)
async def test_rules(run: RunContext, todos: list[dict], merge: bool, expected: str) -> None:
    await call(
        run,
        todos=[
            *THREE[:1],
            {**THREE[1], "status": "pending"},
            {**THREE[2], "status": "in_progress"},
        ],
    )
    before = (await call(run)).text
    result = await call(run, todos=todos, merge=merge)
    assert result.is_error and expected in result.text, result.text
    assert (await call(run)).text == before  # a refused call leaves the plan as it was


def test_the_text_form_reads_back() -> None:
    todos = [
        Todo("1", "Top", "completed"),
        Todo("1.1", "Child: with a colon", "in_progress", "1"),
        Todo("1.1.1", "Grandchild", "pending", "1.1"),
        Todo("2", "Dropped", "cancelled"),
    ]
    text = render(todos)
    assert "1 cancelled" in text.splitlines()[0]
    assert parse_plan(text) == todos
    assert parse_plan("Error: nope") is None
    assert parse_plan("Plan (x):\nnot a line") is None


async def test_a_resumed_conversation_rebuilds_the_plan_from_its_history(
    run: RunContext,
) -> None:
    store = await open_store_for_tests(run.bot)
    conversation = await store.conversation("console", "chat", bot=run.bot.name)
    run.conversation_id = conversation.id
    first = await call(run, todos=THREE)
    call_message = Message("assistant", tool_calls=[ToolCall("c1", "plan", '{"todos": []}')])
    await store.append(conversation.id, call_message)
    await store.append(conversation.id, Message("tool", first.text, tool_call_id="c1", name="plan"))
    error = Message("tool", "Error: 2 items in progress", tool_call_id="c2", name="plan")
    await store.append(conversation.id, error)  # a later refusal does not hide the plan

    restarted = run_context(run.home, conversation_id=conversation.id)  # fresh state
    restarted.open_store = open_store_for_tests
    assert (await call(restarted)).text == first.text
    merged = await call(restarted, merge=True, todos=[{"id": "2", "status": "completed"}])
    assert "[x] 2: Write the client" in merged.text
    other = run_context(run.home, conversation_id=conversation.id + 1)
    other.open_store = open_store_for_tests
    assert (await call(other)).text == "Plan (empty)."


async def test_open_items_are_carried_over_a_compaction(run: RunContext) -> None:
    assert await carried_plan(run) is None
    await call(run, todos=[*THREE, {"id": "4", "content": "Dropped", "status": "cancelled"}])
    assert await carried_plan(run) == (
        "Open plan items (2 of 4):\n[>] 2: Write the client\n[ ] 2.1: Tests for the client"
    )
