"""`in_answer_order`: a person's message stored while a turn ran goes after that turn's answer,
even between its tool rounds; messages the turn saw stay where they are."""

from __future__ import annotations

from atlas.agent.context import in_answer_order, repair_history
from atlas.providers.base import Message, ToolCall


def user(n: int, text: str) -> Message:
    return Message("user", text, id=n)


def answer(n: int, text: str, seen: int) -> Message:
    return Message("assistant", text, id=n, answers_upto=seen)


def shape(messages: list[Message]) -> list[str]:
    return [m.content or m.role for m in messages]


def test_a_message_sent_between_tool_rounds_goes_after_the_answer() -> None:
    call = Message("assistant", "", tool_calls=[ToolCall("c1", "read_file", {})], id=2)
    result = Message("tool", "file text", tool_call_id="c1", name="read_file", id=4)
    stored = [user(1, "first"), call, user(3, "second"), result, answer(5, "done", seen=1)]
    ordered = in_answer_order(stored)
    assert shape(ordered) == ["first", "assistant", "file text", "done", "second"]
    # The tool call keeps its result next to it: nothing for repair_history to mend.
    assert repair_history(ordered) == ordered


def test_two_in_a_row_seen_by_one_turn_stay_before_its_answer() -> None:
    stored = [user(1, "a"), user(2, "b"), answer(3, "both", seen=2)]
    assert shape(in_answer_order(stored)) == ["a", "b", "both"]


def test_several_turns_each_answer_follows_what_it_saw() -> None:
    stored = [
        user(1, "one"),
        user(2, "two"),  # sent while the first turn ran
        user(3, "three"),  # so was this
        answer(4, "re one", seen=1),
        answer(5, "re two and three", seen=3),
        user(6, "four"),
    ]
    assert shape(in_answer_order(stored)) == [
        "one", "re one", "two", "three", "re two and three", "four",
    ]  # fmt: skip
