"""The Chat page's history folding (atlas/dashboard/chat_history.py): stored rows become the
person's message, then the turn's tool calls in order (each folded with its result), then the
reply; long arguments and results are cut with their length shown; a result's HTML is text."""

from __future__ import annotations

import json
from pathlib import Path

from atlas.dashboard.chat_history import (
    ARGUMENTS_SHOWN,
    RESULT_SHOWN,
    SUMMARY_CHARS,
    TURNS_SHOWN,
    ChatItem,
    StoredRow,
    fold,
    read_history,
)
from atlas.dashboard.render import environment
from atlas.providers.base import Message, ToolCall
from atlas.store.conversations import ConversationStore


def _call(call_id: str, name: str, **arguments: object) -> dict[str, object]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


def _user(row_id: int, text: str) -> StoredRow:
    return StoredRow(row_id, "user", text, len(text))


def _result(row_id: int, call_id: str, text: str) -> StoredRow:
    return StoredRow(row_id, "tool", text, len(text), tool_call_id=call_id)


def _rendered(item: ChatItem) -> str:
    template = environment().get_template("chat_message.html")
    return template.render(
        role=item.role, text=item.text, calls=item.calls, kind=item.kind, bot_name="atlas",
        conversation=7,
    )  # fmt: skip


def test_a_turn_with_two_calls_shows_them_in_order_with_their_results() -> None:
    rows = [
        _user(1, "What is in the q3 report?"),
        StoredRow(
            2,
            "assistant",
            "Let me look.",
            12,
            tool_calls=(
                _call("c1", "read_file", path="reports/q3.md"),
                _call("c2", "search", query="zeppelin", limit=3),
            ),
        ),
        _result(3, "c1", "Q3: the fleet grew by two."),
        _result(4, "c2", "3 hits"),
        StoredRow(5, "assistant", "The fleet grew by two.", 22),
        _user(6, "Thanks"),
        StoredRow(7, "assistant", "You are welcome.", 16),
    ]
    items = fold(rows)
    assert [(item.role, item.text) for item in items] == [
        ("user", "What is in the q3 report?"),
        ("assistant", "The fleet grew by two."),
        ("user", "Thanks"),
        ("assistant", "You are welcome."),
    ]
    turn = items[1]
    assert turn.done
    assert [(c.name, c.summary, c.result) for c in turn.calls] == [
        ("read_file", 'path="reports/q3.md"', "Q3: the fleet grew by two."),
        ("search", 'query="zeppelin", limit=3', "3 hits"),
    ]
    assert turn.calls[0].said == "Let me look." and turn.calls[1].said == ""
    assert json.loads(turn.calls[1].arguments) == {"query": "zeppelin", "limit": 3}
    assert items[3].calls == []
    html = _rendered(turn)
    # In order: the text said with the calls, the first call, the second, then the reply.
    order = [
        "Let me look.",
        "read_file",
        "Q3: the fleet grew",
        "search",
        "3 hits",
        "The fleet grew",
    ]
    places = [html.index(part) for part in order]
    assert places == sorted(places)
    assert html.count("<details") == 2 and "<details open" not in html  # folded


def test_calls_over_several_rounds_gather_under_one_reply() -> None:
    rows = [
        _user(1, "go"),
        StoredRow(2, "assistant", "", 0, tool_calls=(_call("a", "first"),)),
        _result(3, "a", "one"),
        StoredRow(4, "assistant", "", 0, tool_calls=(_call("b", "second"),)),
        _result(5, "b", "two"),
        StoredRow(6, "assistant", "done", 4),
    ]
    [_, turn] = fold(rows)
    assert [(c.name, c.result) for c in turn.calls] == [("first", "one"), ("second", "two")]
    assert turn.text == "done"


def test_a_call_without_a_result_yet_is_shown_waiting() -> None:
    rows = [
        _user(1, "Fetch it"),
        StoredRow(2, "assistant", "", 0, tool_calls=(_call("c1", "web_fetch", url="https://x"),)),
    ]
    [_, turn] = fold(rows)
    assert not turn.done and turn.text == ""
    assert turn.calls[0].result is None and turn.calls[0].result_id is None
    html = _rendered(turn)
    assert "web_fetch" in html and "no result stored" in html and 'class="result"' not in html


def test_a_result_whose_call_is_out_of_the_window_is_left_out() -> None:
    rows = [_result(1, "gone", "orphan"), StoredRow(2, "assistant", "Done.", 5)]
    assert [(i.role, i.text, i.calls) for i in fold(rows)] == [("assistant", "Done.", [])]


def test_huge_arguments_and_results_are_cut_with_their_length_shown() -> None:
    body = "x" * 50_000
    rows = [
        _user(1, "Write it"),
        StoredRow(2, "assistant", "", 0, tool_calls=(_call("c1", "write_file", text=body),)),
        _result(3, "c1", "y" * 20_000),  # cut by the read already: length says the whole
        StoredRow(4, "assistant", "Written.", 8),
    ]
    rows[2] = StoredRow(3, "tool", "y" * 20_000, 123_456, tool_call_id="c1")
    [_, turn] = fold(rows)
    call = turn.calls[0]
    assert len(call.arguments) == ARGUMENTS_SHOWN and call.arguments.endswith("…")
    assert call.arguments_length > 50_000
    assert len(call.summary) <= SUMMARY_CHARS and "\n" not in call.summary
    assert len(call.result or "") == RESULT_SHOWN and call.result_length == 123_456
    html = _rendered(turn)
    assert "123,456 characters" in html and f"{call.arguments_length:,} characters" in html
    assert "/conversations/atlas/7/messages/3" in html  # the whole result, one click on
    assert len(html) < 10_000


def test_html_in_a_result_or_arguments_is_escaped() -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    rows = [
        _user(1, "<b>hi</b>"),
        StoredRow(2, "assistant", "", 0, tool_calls=(_call("c1", "<i>tool</i>", q=evil),)),
        _result(3, "c1", evil),
        StoredRow(4, "assistant", "<em>ok</em>", 11),
    ]
    html = "".join(_rendered(item) for item in fold(rows))
    assert "<script>" not in html and "<img" not in html and "<i>" not in html
    assert "<b>" not in html and "<em>" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_arguments_that_are_not_json_are_shown_raw() -> None:
    rows = [
        _user(1, "go"),
        StoredRow(
            2, "assistant", "", 0, tool_calls=({"id": "c", "name": "t", "arguments": "{broken"},)
        ),
    ]
    call = fold(rows)[1].calls[0]
    assert call.arguments == "{broken" and call.summary == "{broken"


async def test_the_history_read_from_a_store_starts_at_a_turn(tmp_path: Path) -> None:
    async with ConversationStore(tmp_path / "c.db") as store:
        chat = await store.conversation("dashboard", "browser", bot="atlas")
        for n in range(TURNS_SHOWN + 2):
            await store.append(chat.id, Message("user", f"question {n}"))
            call = ToolCall(f"c{n}", "lookup", json.dumps({"n": n}))
            await store.append(chat.id, Message("assistant", "", tool_calls=[call]))
            await store.append(chat.id, Message("tool", f"result {n}", tool_call_id=f"c{n}"))
            await store.append(chat.id, Message("assistant", f"answer {n}"))
        items = await store.db.call(lambda db: read_history(db, chat.id))
    assert len(items) == 2 * TURNS_SHOWN
    assert items[0].text == "question 2" and items[-1].text == f"answer {TURNS_SHOWN + 1}"
    assert [(c.summary, c.result) for c in items[1].calls] == [("n=2", "result 2")]
