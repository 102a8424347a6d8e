"""The histories a bot's turns read, kept as messages between turns.

Every turn reads its conversation's history in view; reading and converting every row again
cost a long chat more with each turn (docs/benchmarks.md). The file stays the only truth: each
read asks it for the latest compaction and for the rows newer than those kept, in the same call,
so a message written by anyone (another process too) is seen, and a new compaction makes a whole
read. Rows are only ever appended (delivery marks are not part of a message), which is what makes
"newer than the last id kept" enough.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from atlas.providers.base import Image, Message, ToolCall

if TYPE_CHECKING:
    import sqlite_utils

Compaction = tuple[int, str]  # (first kept message id, summary)
HistoryRow = tuple[int, str, str | None, str | None, str | None, str | None, str | None, int | None]
HISTORY_COLUMNS = "id, role, content, tool_calls, tool_call_id, name, images, answers_upto"
# Memory held over all conversations, roughly: a message costs its text and ~500 bytes. A
# history in view is bounded by the context window, so 64 MiB keeps hundreds of busy chats;
# past it the least recently read go (and are read whole when they come back).
MAX_CACHED_BYTES = 64 * 2**20
MESSAGE_OVERHEAD_BYTES = 512


def _weight(messages: list[Message]) -> int:
    return sum(
        MESSAGE_OVERHEAD_BYTES
        + len(m.content)
        + sum(len(c.arguments) for c in m.tool_calls)
        + sum(len(i.data_b64) for i in m.images)
        for m in messages
    )


def last_compaction(db: sqlite_utils.Database, *, conversation_id: int) -> Compaction | None:
    row = db.execute(
        "SELECT first_kept_id, summary FROM compactions WHERE conversation_id = ? "
        "ORDER BY id DESC LIMIT 1",
        [conversation_id],
    ).fetchone()
    return (row[0], row[1]) if row else None


def history_rows(
    db: sqlite_utils.Database, *, conversation_id: int, kept_from: int | None = None
) -> list[HistoryRow]:
    """Every message of the conversation; with `kept_from`, only its first message and those
    from that id on (what a compaction kept)."""
    if kept_from is None:
        sql = f"SELECT {HISTORY_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id"
        return db.execute(sql, [conversation_id]).fetchall()
    sql = (
        f"SELECT {HISTORY_COLUMNS} FROM messages WHERE conversation_id = :c AND (id >= :kept "
        "OR id = (SELECT MIN(id) FROM messages WHERE conversation_id = :c)) ORDER BY id"
    )
    return db.execute(sql, {"c": conversation_id, "kept": kept_from}).fetchall()


@dataclass(frozen=True)
class Known:
    """What the cache holds of a conversation: its newest message id and its compaction."""

    last_id: int
    compaction: Compaction | None


@dataclass(frozen=True)
class Read:
    """One read: the latest compaction and rows, all of them (`whole`) or only the newer ones."""

    compaction: Compaction | None
    rows: list[HistoryRow]
    whole: bool


def read_history(db: sqlite_utils.Database, *, conversation_id: int, known: Known | None) -> Read:
    """The rows a turn needs that the cache lacks, in one store call."""
    compaction = last_compaction(db, conversation_id=conversation_id)
    if known is None or known.compaction != compaction:
        kept_from = compaction[0] if compaction else None
        rows = history_rows(db, conversation_id=conversation_id, kept_from=kept_from)
        return Read(compaction, rows, whole=True)
    sql = f"SELECT {HISTORY_COLUMNS} FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id"
    return Read(compaction, db.execute(sql, [conversation_id, known.last_id]).fetchall(), False)


@dataclass
class _Entry:
    messages: list[Message]
    known: Known
    weight: int = 0


class HistoryCache:
    """Histories by conversation id, the least recently read dropped first past the limit."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._held = 0

    def known(self, conversation_id: int) -> Known | None:
        entry = self._entries.get(conversation_id)
        return entry.known if entry else None

    def apply(self, conversation_id: int, read: Read) -> list[Message] | None:
        """Merge a read into the cache and return a copy of the history (callers append to
        theirs); None when the read no longer fits what is kept (a whole read made since saw
        another compaction): read the whole history then."""
        entry = self._entries.pop(conversation_id, None)
        if entry is not None:
            self._held -= entry.weight
        if read.whole:
            messages = [message_from_row(row) for row in read.rows]
            entry = _Entry(messages, Known(0, read.compaction), _weight(messages))
        elif entry is None or entry.known.compaction != read.compaction:
            return None
        else:  # only rows this entry lacks: another read may have added some meanwhile
            newer = [message_from_row(row) for row in read.rows if row[0] > entry.known.last_id]
            entry.messages.extend(newer)
            entry.weight += _weight(newer)
        if entry.messages:
            entry.known = Known(entry.messages[-1].id or 0, read.compaction)
        if entry.weight <= self.max_bytes:
            self._entries[conversation_id] = entry
            self._held += entry.weight
            while self._held > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._held -= dropped.weight
        return list(entry.messages)

    def forget(self, conversation_id: int) -> None:
        entry = self._entries.pop(conversation_id, None)
        if entry is not None:
            self._held -= entry.weight


def message_from_row(row: HistoryRow) -> Message:
    """A stored row as a provider message; most rows have neither tool calls nor images, so
    those JSON columns are parsed only when present."""
    message_id, role, content, tool_calls, tool_call_id, name, images, answers_upto = row
    return Message(
        role=role,  # type: ignore[arg-type]  # the column holds only Message roles
        content=content or "",
        tool_calls=[ToolCall(**call) for call in json.loads(tool_calls)] if tool_calls else [],
        tool_call_id=tool_call_id,
        name=name,
        images=[Image(**image) for image in json.loads(images)] if images else [],
        id=message_id,
        answers_upto=answers_upto,
    )
