"""ask_user: the tool (arguments, availability, how each wait ends), the console's questions,
and the question state the chat platforms share."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from atlas.agent.tokens import tool_tokens
from atlas.channels.base import Address, Answer, Question, QuestionOutcome
from atlas.channels.console import ConsoleChannel
from atlas.channels.questions import QuestionSet, action_key, parse_action
from atlas.home import Home
from atlas.tools.ask import ASK_TOOLS, ask_user
from atlas.tools.registry import RunContext, RunKind
from tests.helpers import BASE_CONFIG, make_home, run_context

ADDRESS = Address("atlas", "console", "local")


class Recorder:
    """Stands in for the channel behind run.ask_questions: records, then answers as told."""

    def __init__(self, outcome: QuestionOutcome | None = None, wait: bool = False) -> None:
        self.outcome = outcome
        self.wait = wait
        self.asked: list[list[Question]] = []

    async def __call__(self, questions: list[Question]) -> QuestionOutcome:
        self.asked.append(questions)
        if self.wait:
            await asyncio.Event().wait()
        assert self.outcome is not None
        return self.outcome


def bound(home: Home, recorder: Recorder | None, kind: RunKind = "conversation") -> RunContext:
    run = run_context(home, kind=kind)
    if recorder is not None:
        run.ask_questions = recorder  # type: ignore[attr-defined]
    return run


def one(question: str = "Which?", **extra: Any) -> dict[str, Any]:
    return {"questions": [{"question": question, **extra}]}


# --- the tool --------------------------------------------------------------------------------


def test_the_schema_is_small_and_the_tool_is_listed() -> None:
    assert tool_tokens(ask_user.spec()) <= 300
    assert [ask_user] == ASK_TOOLS
    assert ask_user.spec().parameters["properties"]["questions"]["maxItems"] == 5


@pytest.mark.parametrize("kind", ["bot", "routine", "subagent"])
async def test_only_a_conversation_run_has_it(home: Home, kind: RunKind) -> None:
    recorder = Recorder(QuestionOutcome("submitted", (Answer(("a",)),)))
    result = await ask_user.invoke(bound(home, recorder, kind), one(choices=["a"]))
    assert result.is_error and f"not available in a {kind} run" in result.text
    assert recorder.asked == []


async def test_submitted_answers_come_back_with_their_questions(home: Home) -> None:
    answers = (Answer(("Postgres",)), Answer(("auth", "billing")), Answer(other="blue-ish"))
    recorder = Recorder(QuestionOutcome("submitted", answers))
    arguments = {
        "questions": [
            {"question": "Database?", "choices": ["Postgres", "SQLite", "Other"]},
            {"question": "Features?", "choices": ["auth", "billing"], "multi_select": True},
            {"question": "Colour?"},
        ]
    }
    result = await ask_user.invoke(bound(home, recorder), arguments)
    assert not result.is_error
    assert result.text == (
        "The user answered:\n"
        "1. Database?\n   → Postgres\n"
        "2. Features?\n   → auth; billing\n"
        "3. Colour?\n   → in their own words: blue-ish"
    )
    [asked] = recorder.asked
    assert asked == [
        Question("Database?", ("Postgres", "SQLite")),  # "Other" is the channel's to add
        Question("Features?", ("auth", "billing"), multi_select=True),
        Question("Colour?", ()),
    ]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("cancelled", "The user cancelled the questions without answering (by Ann)."),
        ("undelivered", "The questions could not be shown to the user (by Ann)."),
    ],
)
async def test_each_way_the_wait_ends_is_said(home: Home, status: str, expected: str) -> None:
    recorder = Recorder(QuestionOutcome(status, detail="by Ann"))  # type: ignore[arg-type]
    result = await ask_user.invoke(bound(home, recorder), one(choices=["a"]))
    assert result.text.startswith(expected)


async def test_no_answer_within_the_configured_time_is_timed_out(tmp_path: Path) -> None:
    config = (
        BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[chat]\nask_user_timeout = 0.05\n"
    )
    home = make_home(tmp_path / "home", config=config)
    result = await ask_user.invoke(bound(home, Recorder(wait=True)), one(choices=["a"]))
    assert result.text.startswith("Nobody answered within 0 s")


async def test_a_run_whose_channel_cannot_ask_is_undelivered(home: Home) -> None:
    result = await ask_user.invoke(bound(home, None), one(choices=["a"]))
    assert result.text.startswith("The questions could not be shown to the user")
    assert "console channel cannot ask questions" in result.text


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"questions": []}, "at least 1 item"),
        ({"questions": [{"question": f"q{n}"} for n in range(6)]}, "at most 5 items"),
        (one(choices=["a", "b", "c", "d", "e"]), "5 choices; give at most 4"),
        (one(choices=["a", "A"]), "the choice 'A' twice"),
        (one(choices=["x" * 80]), "keep choices under 75"),
        (one("   "), "question 1 is empty"),
        (one(choices=[""]), "an empty choice"),
    ],
)
async def test_bad_questions_are_refused_with_the_reason(
    home: Home, arguments: dict[str, Any], error: str
) -> None:
    recorder = Recorder(QuestionOutcome("cancelled"))
    result = await ask_user.invoke(bound(home, recorder), arguments)
    assert result.is_error and error in result.text, result.text
    assert recorder.asked == []


# --- the console -----------------------------------------------------------------------------


def console(typed: str) -> tuple[ConsoleChannel, io.StringIO]:
    reader = asyncio.StreamReader()
    reader.feed_data(typed.encode())
    reader.feed_eof()
    out = io.StringIO()
    return ConsoleChannel(reader, out), out


async def test_console_numbers_multi_select_and_other() -> None:
    channel, out = console("9\n2\n1, 3\n\no\nmy own words\n")
    outcome = await channel.ask_questions(
        ADDRESS,
        [
            Question("Database?", ("Postgres", "SQLite")),
            Question("Features?", ("auth", "search", "billing"), multi_select=True),
            Question("Colour?", ("red",)),
        ],
    )
    assert outcome == QuestionOutcome(
        "submitted",
        (Answer(("SQLite",)), Answer(("auth", "billing")), Answer(other="my own words")),
    )
    shown = out.getvalue()
    assert "? (1/3) Database?" in shown and "1. Postgres (recommended)" in shown
    assert (
        "o. Other" in shown and shown.count("choose a number") == 4
    )  # again after 9, and after an empty line


async def test_console_other_alongside_ticks_and_a_free_text_question() -> None:
    channel, _ = console("2 o\nalso dark mode\nnothing to add\n")
    outcome = await channel.ask_questions(
        ADDRESS,
        [Question("Features?", ("auth", "search"), multi_select=True), Question("Notes?")],
    )
    assert outcome.answers == (
        Answer(("search",), other="also dark mode"),
        Answer(other="nothing to add"),
    )


@pytest.mark.parametrize("typed", ["c\n", "1\n", ""])
async def test_console_cancel_or_end_of_input_cancels(typed: str) -> None:
    channel, _ = console(typed)
    outcome = await channel.ask_questions(
        ADDRESS, [Question("A?", ("x", "y")), Question("B?", ("z",))]
    )
    assert outcome.status == "cancelled" and outcome.answers == ()


async def test_console_without_input_is_undelivered() -> None:
    outcome = await ConsoleChannel(None, io.StringIO()).ask_questions(ADDRESS, [Question("A?")])
    assert outcome.status == "undelivered"


# --- the shared question state -----------------------------------------------------------


def test_action_keys_round_trip_and_strangers_are_refused() -> None:
    key = action_key("ab12", 3, "c", 2)
    assert key == "ab12:3:c2"
    parsed = parse_action(key)
    assert parsed is not None and (parsed.request_id, parsed.question, parsed.choice) == (
        "ab12",
        3,
        2,
    )
    for bad in ("", "ab12:3", "ab12:x:c1", "ab12:3:c", "ab12:3:d1", "ab12:3:z", ":1:d"):
        assert parse_action(bad) is None, bad


async def test_a_question_set_submits_once_every_question_is_answered() -> None:
    asked = QuestionSet(
        "r1", [Question("A?", ("x", "y"), multi_select=True), Question("B?", ("z",))]
    )
    assert asked.done(0, "ann") is None  # nothing ticked yet
    asked.toggle(0, 1)
    asked.toggle(0, 0)
    asked.toggle(0, 1)
    assert asked.done(0, "ann") == Answer(("x",), by="ann")
    assert not asked.closed and asked.open_questions() == [1]
    assert not asked.is_open(0)
    asked.write(1, "  free  ", "bob")
    outcome = await asked.outcome
    assert outcome.answers == (Answer(("x",), by="ann"), Answer(other="free", by="bob"))
    asked.cancel("late")  # a set already submitted stays submitted
    assert asked.outcome.result().status == "submitted"
