"""The dashboard's reads of a bot's `conversations.db` and of `atlas.db`, as functions of the
sqlite-utils database run on each store's thread (`Database.call`). Its reads of atlas.db go
through atlas/dashboard/reads.py (`DashboardReads`), where PostgreSQL's stand beside them.

Messages have no index on time, but their ids grow with it (every message is appended), so the
first message of a period is found by a binary search over ids, and a query over today reads
only today's rows, not a long history's (docs/benchmarks.md: Home with 100,000 messages).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any

import sqlite_utils

CONVERSATIONS_PER_PAGE = 50
MESSAGES_PER_PAGE = 60
DECISIONS_PER_PAGE = 100
TEXT_SHOWN = 4000  # characters of a message shown in the conversation view; the rest one click on


def first_id_since(db: sqlite_utils.Database, since: str) -> int | None:
    """The smallest message id created at or after `since` (UTC ISO), assuming ids grow with
    time; None when no message is that recent."""
    low, high = db.execute("SELECT MIN(id), MAX(id) FROM messages").fetchone()
    if low is None:
        return None
    newest = db.execute("SELECT created_at FROM messages WHERE id = ?", [high]).fetchone()[0]
    if newest < since:
        return None
    while low < high:  # ids may have gaps: look at the first existing id at or above `middle`
        middle = (low + high) // 2
        row = db.execute(
            "SELECT id, created_at FROM messages WHERE id >= ? ORDER BY id LIMIT 1", [middle]
        ).fetchone()
        if row[1] >= since:
            high = row[0]
        else:
            low = row[0] + 1
    return low


@dataclass
class DayStats:
    turns: int = 0  # final answers: assistant messages that call no tool
    messages: int = 0  # every message stored
    input_tokens: int = 0
    output_tokens: int = 0


def stats_since(db: sqlite_utils.Database, since: str) -> DayStats:
    floor = first_id_since(db, since)
    if floor is None:
        return DayStats()
    row = db.execute(
        "SELECT SUM(role = 'assistant' AND tool_calls IS NULL), COUNT(*), "
        "SUM(json_extract(usage, '$.input_tokens')), SUM(json_extract(usage, '$.output_tokens')) "
        "FROM messages WHERE id >= ? AND created_at >= ?",
        [floor, since],
    ).fetchone()
    return DayStats(*(int(value or 0) for value in row))


@dataclass(frozen=True)
class UsageRow:
    hour: str  # UTC, "YYYY-MM-DDTHH"
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int


def usage_by_hour(db: sqlite_utils.Database, since: str) -> list[UsageRow]:
    """Token usage per UTC hour and model since `since`: the caller sums hours into local days."""
    floor = first_id_since(db, since)
    if floor is None:
        return []
    rows = db.execute(
        "SELECT substr(created_at, 1, 13), COALESCE(model, ''), "
        "SUM(json_extract(usage, '$.input_tokens')), SUM(json_extract(usage, '$.output_tokens')), "
        "SUM(json_extract(usage, '$.cache_read_tokens')) "
        "FROM messages WHERE id >= ? AND created_at >= ? AND usage IS NOT NULL "
        "GROUP BY 1, 2",
        [floor, since],
    ).fetchall()
    return [UsageRow(h, m, int(i or 0), int(o or 0), int(c or 0)) for h, m, i, o, c in rows]


def list_conversations(
    db: sqlite_utils.Database, *, limit: int, offset: int
) -> tuple[list[dict[str, Any]], int]:
    """A page of conversations, latest first, each with its message count; and the total."""
    total = db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
    rows = list(
        db.query(
            "SELECT c.*, (SELECT COUNT(*) FROM messages AS m WHERE m.conversation_id = c.id) "
            "AS messages FROM conversations AS c ORDER BY c.updated_at DESC, c.id DESC "
            "LIMIT ? OFFSET ?",
            [limit, offset],
        )
    )
    return rows, total


@dataclass
class ToolCallView:
    id: str
    name: str
    arguments: str
    result: str | None = None  # the tool message answering it, cut to TEXT_SHOWN
    result_id: int | None = None
    result_length: int = 0


@dataclass
class MessageView:
    id: int
    role: str
    kind: str
    content: str
    length: int
    created_at: str
    model: str | None
    calls: list[ToolCallView] = field(default_factory=list)


def _arguments(raw: Any) -> str:
    """A call's arguments as readable JSON (the stored raw string when it is not JSON)."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, indent=1)
    except (TypeError, ValueError):
        return str(raw)


_PAGE_SQL = (
    "SELECT id, role, kind, substr(content, 1, :chars) AS content, length(content) AS length, "
    "tool_calls, tool_call_id, created_at, model FROM messages "
    "WHERE conversation_id = :c AND id > :after ORDER BY id LIMIT :limit"
)


def conversation_page(
    db: sqlite_utils.Database, conversation_id: int, *, after_id: int, limit: int
) -> tuple[list[MessageView], int | None]:
    """Messages after `after_id` in order, each tool result folded under its call; and the id
    to continue after, None at the end. The results of the page's last calls are read with
    it, so a page never ends between a call and its result."""
    params = {"c": conversation_id, "after": after_id, "limit": limit, "chars": TEXT_SHOWN}
    rows = list(db.query(_PAGE_SQL, params))
    shown: list[MessageView] = []
    calls: dict[str, ToolCallView] = {}
    while rows:
        for row in rows:
            _add_row(row, shown, calls)
        waiting = sum(1 for call in calls.values() if call.result_id is None)
        if not waiting or len(rows) < params["limit"]:
            break
        # The page ended inside a round of tool calls: read on through its results.
        params = {**params, "after": rows[-1]["id"], "limit": waiting}
        following = db.query(_PAGE_SQL, params)
        rows = list(
            takewhile(lambda r: r["role"] == "tool" and r["tool_call_id"] in calls, following)
        )
    last = max((m.id for m in shown), default=after_id)
    last = max([last, *(c.result_id for c in calls.values() if c.result_id is not None)])
    more = db.execute(
        "SELECT 1 FROM messages WHERE conversation_id = ? AND id > ? LIMIT 1",
        [conversation_id, last],
    ).fetchone()
    return shown, (last if more else None)


@dataclass
class Window:
    """A page of one conversation and where to go on: `earlier` is the `before` cursor of
    the page before it, `later` the `after` cursor of the next; None at either end."""

    messages: list[MessageView]
    earlier: int | None
    later: int | None


def conversation_window(
    db: sqlite_utils.Database,
    conversation_id: int,
    *,
    after_id: int | None = None,
    before_id: int | None = None,
    limit: int,
) -> Window:
    """A page by message id cursors: after `after_id` (from 0: the start), else the last
    `limit` messages before `before_id` (none given: the end, where a conversation opens).
    A page never starts on a tool result: it starts at the call it answers."""
    if after_id is None:
        after_id, limit = _start_before(db, conversation_id, before_id, limit)
    messages, later = conversation_page(db, conversation_id, after_id=after_id, limit=limit)
    first = messages[0].id if messages else after_id + 1
    sooner = db.execute(
        "SELECT 1 FROM messages WHERE conversation_id = ? AND id < ? LIMIT 1",
        [conversation_id, first],
    ).fetchone()
    return Window(messages, first if sooner else None, later)


def _start_before(
    db: sqlite_utils.Database, conversation_id: int, before_id: int | None, limit: int
) -> tuple[int, int]:
    """The page that ends just before `before_id`: its `after` cursor and its length."""
    bound = before_id if before_id is not None else 2**63 - 1
    ids = db.execute(
        "SELECT id, role FROM messages WHERE conversation_id = ? AND id < ? "
        "ORDER BY id DESC LIMIT ?",
        [conversation_id, bound, limit],
    ).fetchall()
    if not ids:
        return (bound - 1 if before_id is not None else 0), limit
    start, role = ids[-1]
    if role != "tool":
        return start - 1, len(ids)
    # Back to the call it answers, so the two are shown together.
    call = db.execute(
        "SELECT id FROM messages WHERE conversation_id = ? AND id < ? AND role != 'tool' "
        "ORDER BY id DESC LIMIT 1",
        [conversation_id, start],
    ).fetchone()
    start = call[0] if call else start
    (length,) = db.execute(
        "SELECT count(*) FROM messages WHERE conversation_id = ? AND id >= ? AND id < ?",
        [conversation_id, start, bound],
    ).fetchone()
    return start - 1, length


def _add_row(row: dict[str, Any], shown: list[MessageView], calls: dict[str, ToolCallView]) -> None:
    if row["role"] == "tool" and row["tool_call_id"] in calls:
        call = calls[row["tool_call_id"]]
        call.result, call.result_id, call.result_length = row["content"], row["id"], row["length"]
        return
    view = MessageView(
        row["id"],
        row["role"],
        row["kind"],
        row["content"] or "",
        row["length"] or 0,
        row["created_at"],
        row["model"],
    )
    for call in json.loads(row["tool_calls"] or "[]"):
        arguments = _arguments(call.get("arguments"))
        call_view = ToolCallView(str(call.get("id", "")), str(call.get("name", "?")), arguments)
        calls[call_view.id] = call_view
        view.calls.append(call_view)
    shown.append(view)


def whole_message(db: sqlite_utils.Database, conversation_id: int, message_id: int) -> str | None:
    row = db.execute(
        "SELECT content FROM messages WHERE id = ? AND conversation_id = ?",
        [message_id, conversation_id],
    ).fetchone()
    return None if row is None else row[0]


@dataclass(frozen=True)
class DecisionFilter:
    bot: str = ""
    verdict: str = ""  # allow | deny
    answered_by: str = ""  # rule | guardian | user | timeout | nobody
    tool: str = ""
    text: str = ""  # found in the summary, rule or reason

    def sql(self, *, postgres: bool = False) -> tuple[str, list[Any]]:
        """The WHERE condition and its values: SQLite's (`?`), or PostgreSQL's (`$1`...,
        ILIKE: SQLite's LIKE ignores the case of ASCII letters, PostgreSQL's does not)."""
        conditions: list[str] = []
        params: list[Any] = []

        def mark() -> str:
            return f"${len(params)}" if postgres else "?"

        for column in ("bot", "verdict", "answered_by", "tool"):
            if value := getattr(self, column):
                params.append(value)
                conditions.append(f"{column} = {mark()}")  # column names are ours, not input
        if self.text:
            like = "%" + self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            operator = "ILIKE" if postgres else "LIKE"
            matches = []
            for column in ("summary", "rule", "reason"):
                params.append(like + "%")
                matches.append(f"{column} {operator} {mark()} ESCAPE '\\'")
            conditions.append(f"({' OR '.join(matches)})")
        return " AND ".join(conditions) or ("TRUE" if postgres else "1"), params


def gate_decisions(
    db: sqlite_utils.Database, where: DecisionFilter, *, before_id: int | None, limit: int
) -> list[dict[str, Any]]:
    condition, params = where.sql()
    if before_id is not None:
        condition += " AND id < ?"
        params.append(before_id)
    return list(
        db.query(
            f"SELECT * FROM gate_decisions WHERE {condition} ORDER BY id DESC LIMIT ?",
            [*params, limit],
        )
    )


def pending_pairings(db: sqlite_utils.Database, now: str) -> int:
    """Strangers waiting for `atlas pairing approve`."""
    row = db.execute(
        "SELECT COUNT(*) FROM pairing_codes WHERE status = 'pending' AND expires_at > ?", [now]
    ).fetchone()
    return int(row[0])
