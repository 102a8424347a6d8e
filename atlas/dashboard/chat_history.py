"""The Chat page's history: stored messages folded into what the page shows.

A turn is stored as the person's message, then the assistant's rounds of tool calls (an
assistant row with `tool_calls`, a `role="tool"` row answering each), then the reply text. The
page shows each turn as the person's message, then the calls in order (each folded: its name
and a one-line summary; opened, its arguments and result, cut to a length that a page can
hold, the whole length shown), then the reply text. The tool results are untrusted text: they
are only ever rendered by autoescaped templates (chat_message.html).

`fold` is pure (a unit can test it on rows); `read_history` reads the rows on the store's
thread. The live reply's calls (pages/chat.py) become `CallItem`s through `live_call`, so a
turn looks the same while it runs and after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

TURNS_SHOWN = 20  # the latest turns (person's messages) shown; the rest is on Conversations
ROWS_READ = 400  # at most this many stored rows read for them (a turn of very many calls)
TEXT_CHARS = 20_000  # characters of a message shown (as a message may be written)
ARGUMENTS_SHOWN = 2_000  # characters of a call's arguments shown when opened
RESULT_SHOWN = 4_000  # characters of a call's result shown when opened
SUMMARY_CHARS = 80  # the one-line summary of a call's arguments


@dataclass(frozen=True)
class StoredRow:
    """One row of `messages` as the history reads it; `content` may be cut, `length` is whole."""

    id: int
    role: str
    content: str
    length: int
    tool_calls: tuple[dict[str, Any], ...] = ()
    tool_call_id: str | None = None
    kind: str = "message"

    @classmethod
    def read(cls, row: Mapping[str, Any]) -> StoredRow:
        """From a row of the history's query, either engine's (columns id, role, content cut,
        length, tool_calls as JSON text, tool_call_id, kind)."""
        return cls(
            id=row["id"],
            role=row["role"],
            content=row["content"] or "",
            length=row["length"] or 0,
            tool_calls=tuple(json.loads(row["tool_calls"] or "[]")),
            tool_call_id=row["tool_call_id"],
            kind=row["kind"],
        )


@dataclass
class CallItem:
    """One tool call, folded: `summary` is shown closed, `arguments` and `result` opened."""

    id: str
    name: str
    summary: str
    arguments: str  # readable JSON, cut to ARGUMENTS_SHOWN
    arguments_length: int
    said: str = ""  # text the model wrote along with this call, shown before it
    result: str | None = None  # None: no result stored (yet)
    result_id: int | None = None  # the tool message, for the whole of a long result
    result_length: int = 0


@dataclass
class ChatItem:
    """One entry of the log: the person's message, or an assistant turn's calls and reply."""

    role: str
    text: str
    calls: list[CallItem] = field(default_factory=list)
    kind: str = "message"
    done: bool = True  # False: an assistant turn whose reply text is not stored (yet)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _readable(raw: Any) -> tuple[str, Any]:
    """Arguments as readable JSON and as parsed (the raw text and None when not JSON)."""
    if not isinstance(raw, str):  # stored parsed by some writer
        return json.dumps(raw, ensure_ascii=False, indent=1), raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw, None
    return json.dumps(parsed, ensure_ascii=False, indent=1), parsed


def summary(parsed: Any, readable: str) -> str:
    """One line for a call's arguments: `key=value, …` (values as JSON), shortened."""
    if isinstance(parsed, dict):
        line = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in parsed.items())
    else:
        line = readable
    return _cut(" ".join(line.split()), SUMMARY_CHARS)  # newlines, runs of spaces: one space


def call_item(call_id: str, name: str, raw_arguments: Any) -> CallItem:
    readable, parsed = _readable(raw_arguments)
    return CallItem(
        id=call_id,
        name=name or "?",
        summary=summary(parsed, readable),
        arguments=_cut(readable, ARGUMENTS_SHOWN),
        arguments_length=len(readable),
    )


def live_call(call: Any) -> CallItem:
    """A call of the reply being written (a ToolCall: id, name, raw arguments)."""
    return call_item(str(call.id), str(call.name), call.arguments)


def fold(rows: list[StoredRow]) -> list[ChatItem]:
    """Rows of one conversation, oldest first, as the log's items: each assistant turn's
    calls (with their results) gathered under its reply, in order. A result whose call is
    not among the rows (cut off by the window) is left out; so are roles the chat never
    shows (system)."""
    items: list[ChatItem] = []
    turn: ChatItem | None = None  # the assistant turn still gathering calls
    waiting: dict[str, CallItem] = {}  # its calls by id, for their results
    for row in rows:
        if row.role == "tool":
            call = waiting.get(row.tool_call_id or "")
            if call is not None:
                call.result = _cut(row.content, RESULT_SHOWN)
                call.result_id, call.result_length = row.id, row.length
            continue
        if row.role == "assistant" and row.tool_calls:
            if turn is None:
                turn = ChatItem("assistant", "", done=False, kind=row.kind)
                items.append(turn)
            for index, raw in enumerate(row.tool_calls):
                call = call_item(
                    str(raw.get("id", "")), str(raw.get("name", "")), raw.get("arguments")
                )
                if index == 0:
                    call.said = row.content
                turn.calls.append(call)
                waiting[call.id] = call
            continue
        if row.role == "assistant" and turn is not None:
            turn.text, turn.done, turn.kind = row.content, True, row.kind
        elif row.role in ("user", "assistant"):
            items.append(ChatItem(row.role, row.content, kind=row.kind))
        else:
            continue
        turn, waiting = None, {}
    return items


_ROWS_SQL = (
    "SELECT id, role, kind, substr(content, 1, :chars) AS content, length(content) AS length, "
    "tool_calls, tool_call_id FROM messages "
    "WHERE conversation_id = :c AND id >= :start ORDER BY id DESC LIMIT :rows"
)


def read_rows(db: sqlite_utils.Database, conversation_id: int) -> list[StoredRow]:
    """The rows of the latest TURNS_SHOWN turns (from a person's message on), oldest first;
    at most ROWS_READ of them, the latest."""
    start = db.execute(
        "SELECT id FROM messages WHERE conversation_id = ? AND role = 'user' "
        "ORDER BY id DESC LIMIT 1 OFFSET ?",
        [conversation_id, TURNS_SHOWN - 1],
    ).fetchone()
    params = {"c": conversation_id, "start": start[0] if start else 0, "rows": ROWS_READ}
    rows = [StoredRow.read(row) for row in db.query(_ROWS_SQL, {**params, "chars": TEXT_CHARS})]
    rows.reverse()
    return rows


def read_history(db: sqlite_utils.Database, conversation_id: int) -> list[ChatItem]:
    """The chat's latest turns as the log shows them (run on the store's thread)."""
    return fold(read_rows(db, conversation_id))


__all__ = [
    "CallItem",
    "ChatItem",
    "StoredRow",
    "call_item",
    "fold",
    "live_call",
    "read_history",
    "read_rows",
    "summary",
]
