"""A bot's conversations and messages in `bots/<name>/conversations.db`, searchable by FTS5."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, get_args

import sqlite_utils

from atlas.errors import AtlasError
from atlas.providers.base import Image, Message, ToolCall, Usage
from atlas.store.db import Database, Migration, utc_now_iso

ConversationKind = Literal["conversation", "bot", "routine", "subagent"]
MessageKind = Literal["message", "notice"]

FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"


def _create_conversations(db: sqlite_utils.Database) -> None:
    db["conversations"].create(
        {
            "id": int,
            "bot": str,
            "channel": str,
            "chat": str,
            "thread": str,
            "user": str,
            "kind": str,
            "title": str,
            "created_at": str,
            "updated_at": str,
        },
        pk="id",
        not_null={"bot", "channel", "chat", "thread", "user", "kind", "created_at", "updated_at"},
        # '' rather than NULL for "no thread/user": NULLs never collide in a unique index.
        defaults={"thread": "", "user": "", "kind": "conversation"},
    )
    db["conversations"].create_index(
        ["channel", "chat", "thread", "user"], index_name="conversations_key", unique=True
    )


def _create_messages(db: sqlite_utils.Database) -> None:
    db["messages"].create(
        {
            "id": int,
            "conversation_id": int,
            "role": str,
            "content": str,
            "tool_calls": str,  # JSON list of {id, name, arguments}
            "tool_call_id": str,
            "name": str,
            "images": str,  # JSON list of {media_type, data_b64}
            "usage": str,  # JSON of Usage.to_dict()
            "model": str,
            "event_id": str,
            "kind": str,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("conversation_id", "conversations", "id")],
        not_null={"conversation_id", "role", "content", "kind", "created_at"},
        defaults={"content": "", "kind": "message"},
    )
    db["messages"].create_index(["conversation_id", "id"], index_name="messages_by_conversation")
    # A platform event id is stored once per conversation: redelivered events are dropped.
    db.execute(
        "CREATE UNIQUE INDEX messages_event ON messages (conversation_id, event_id) "
        "WHERE event_id IS NOT NULL"
    )


def _index_messages(db: sqlite_utils.Database) -> None:
    db["messages"].enable_fts(["content"], create_triggers=True, tokenize=FTS_TOKENIZE)


MIGRATIONS: list[Migration] = [
    ("001_conversations", _create_conversations),
    ("002_messages", _create_messages),
    ("003_messages_fts", _index_messages),
]


@dataclass(frozen=True)
class Conversation:
    """One row of `conversations`; timestamps are UTC ISO 8601 strings."""

    id: int
    bot: str
    channel: str
    chat: str
    thread: str
    user: str
    kind: ConversationKind
    title: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class SearchHit:
    """One message found by `search`; `snippet` marks matched words with **…**."""

    message_id: int
    conversation_id: int
    role: str
    snippet: str
    created_at: str


def fts_query(text: str) -> str | None:
    """Turn a person's text into a safe FTS5 query: each term a quoted phrase, ANDed; None if
    nothing searchable is left."""
    terms = [term for term in text.split() if any(ch.isalnum() for ch in term)]
    # A term without letters or digits yields no tokens, and an empty phrase matches nothing.
    if not terms:
        return None
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _json_or_none(items: list[dict[str, Any]] | dict[str, Any] | None) -> str | None:
    return json.dumps(items, ensure_ascii=False) if items else None


def _message_from_row(row: dict[str, Any]) -> Message:
    return Message(
        role=row["role"],
        content=row["content"] or "",
        tool_calls=[ToolCall(**call) for call in json.loads(row["tool_calls"] or "[]")],
        tool_call_id=row["tool_call_id"],
        name=row["name"],
        images=[Image(**image) for image in json.loads(row["images"] or "[]")],
    )


class ConversationStore:
    """A bot's conversation store; open it before use (or use it as an async context manager)."""

    def __init__(self, path: Path) -> None:
        self.db = Database(path, MIGRATIONS)

    @property
    def path(self) -> Path:
        return self.db.path

    async def open(self) -> None:
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> ConversationStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def conversation(
        self,
        channel: str,
        chat: str,
        *,
        thread: str = "",
        user: str = "",
        kind: ConversationKind = "conversation",
        bot: str,
        title: str | None = None,
    ) -> Conversation:
        """The conversation for channel + chat + thread + user, created on first use.
        An existing conversation is returned as it is: bot, kind and title do not change."""
        if kind not in get_args(ConversationKind):
            raise ValueError(
                f"conversation kind {kind!r} is not one of {get_args(ConversationKind)}"
            )
        key = {"channel": channel, "chat": chat, "thread": thread or "", "user": user or ""}

        def get_or_create(db: sqlite_utils.Database) -> dict[str, Any]:
            now = utc_now_iso()
            with db.atomic():
                db.execute(
                    "INSERT INTO conversations "
                    "(bot, channel, chat, thread, user, kind, title, created_at, updated_at) "
                    "VALUES (:bot, :channel, :chat, :thread, :user, :kind, :title, :now, :now) "
                    "ON CONFLICT (channel, chat, thread, user) DO NOTHING",
                    {**key, "bot": bot, "kind": kind, "title": title, "now": now},
                )
                return next(
                    db.query(
                        "SELECT * FROM conversations WHERE channel = :channel AND chat = :chat "
                        "AND thread = :thread AND user = :user",
                        key,
                    )
                )

        return Conversation(**await self.db.call(get_or_create))

    async def get_conversation(self, conversation_id: int) -> Conversation | None:
        def get(db: sqlite_utils.Database) -> dict[str, Any] | None:
            rows = db.query("SELECT * FROM conversations WHERE id = ?", [conversation_id])
            return next(rows, None)

        row = await self.db.call(get)
        return Conversation(**row) if row else None

    async def append(
        self,
        conversation_id: int,
        message: Message,
        *,
        usage: Usage | None = None,
        model: str | None = None,
        event_id: str | None = None,
        kind: MessageKind = "message",
    ) -> int | None:
        """Store a message and return its id; None when `event_id` is already stored in this
        conversation (a platform redelivered an event)."""
        if kind not in get_args(MessageKind):
            raise ValueError(f"message kind {kind!r} is not one of {get_args(MessageKind)}")
        data = message.to_dict()
        row = {
            "conversation_id": conversation_id,
            "role": message.role,
            "content": message.content or "",
            "tool_calls": _json_or_none(data.get("tool_calls")),
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "images": _json_or_none(data.get("images")),
            "usage": _json_or_none(usage.to_dict() if usage else None),
            "model": model,
            "event_id": event_id,
            "kind": kind,
        }

        def insert(db: sqlite_utils.Database) -> int | None:
            now = utc_now_iso()
            with db.atomic():
                if (
                    db.execute(
                        "SELECT 1 FROM conversations WHERE id = ?", [conversation_id]
                    ).fetchone()
                    is None
                ):
                    raise AtlasError(f"{self.path}: no conversation with id {conversation_id}")
                cursor = db.execute(
                    "INSERT INTO messages (conversation_id, role, content, tool_calls, "
                    "tool_call_id, name, images, usage, model, event_id, kind, created_at) "
                    "VALUES (:conversation_id, :role, :content, :tool_calls, :tool_call_id, "
                    ":name, :images, :usage, :model, :event_id, :kind, :now) "
                    "ON CONFLICT (conversation_id, event_id) WHERE event_id IS NOT NULL DO NOTHING",
                    {**row, "now": now},
                )
                if cursor.rowcount == 0:
                    return None
                message_id = cursor.lastrowid
                db.execute(
                    "UPDATE conversations SET updated_at = ? WHERE id = ?", [now, conversation_id]
                )
                return message_id

        return await self.db.call(insert)

    async def history(self, conversation_id: int) -> list[Message]:
        """Every message of a conversation, oldest first, as provider messages."""

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(
                db.query(
                    "SELECT role, content, tool_calls, tool_call_id, name, images FROM messages "
                    "WHERE conversation_id = ? ORDER BY id",
                    [conversation_id],
                )
            )

        return [_message_from_row(row) for row in await self.db.call(select)]

    async def search(
        self, query: str, *, limit: int = 20, conversation_id: int | None = None
    ) -> list[SearchHit]:
        """Messages matching every word of `query` (stemmed, accents ignored), best first."""
        match = fts_query(query)
        if match is None or limit <= 0:
            return []
        sql = (
            "SELECT m.id AS message_id, m.conversation_id, m.role, "
            "snippet(messages_fts, 0, '**', '**', '…', 16) AS snippet, m.created_at "
            "FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid "
            "WHERE messages_fts MATCH :match"
            + (" AND m.conversation_id = :conversation_id" if conversation_id is not None else "")
            + " ORDER BY bm25(messages_fts), m.id LIMIT :limit"
        )
        params = {"match": match, "conversation_id": conversation_id, "limit": limit}

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(db.query(sql, params))

        return [SearchHit(**row) for row in await self.db.call(select)]

    async def usage_totals(self, conversation_id: int) -> Usage:
        """The sum of the usage recorded on a conversation's messages."""
        names = [f.name for f in fields(Usage)]
        # Field names come from our own dataclass, never from input, so formatting them is safe.
        sums = ", ".join(
            f"COALESCE(SUM(json_extract(usage, '$.{name}')), 0) AS {name}" for name in names
        )
        sql = f"SELECT {sums} FROM messages WHERE conversation_id = ? AND usage IS NOT NULL"

        def select(db: sqlite_utils.Database) -> dict[str, Any]:
            return next(db.query(sql, [conversation_id]))

        row = await self.db.call(select)
        return Usage(**{name: int(row[name]) for name in names})
