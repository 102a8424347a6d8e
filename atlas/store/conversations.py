"""A bot's conversations and messages in `bots/<name>/conversations.db`, searchable by FTS5."""

from __future__ import annotations

import json
import re
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
# Substrings of three characters: finds words in scripts written without spaces (Chinese,
# Japanese, Korean) and parts of words. (SQLite before 3.45 has no remove_diacritics here.)
TRIGRAM_TOKENIZE = "trigram"
SearchIndex = Literal["words", "trigram"]
SearchSort = Literal["relevance", "newest", "oldest"]
DEFAULT_ROLES = ("user", "assistant")

_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
)
# Quotes and FTS5 operators around a term are not part of what a person looks for.
_TERM_EDGES = "\"'“”‘’«»()[]{}*^:,.;!?"


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


def _index_messages_by_trigram(db: sqlite_utils.Database) -> None:
    db.execute(
        "CREATE VIRTUAL TABLE messages_trigram USING fts5(content, content='messages', "
        f"content_rowid='id', tokenize='{TRIGRAM_TOKENIZE}')"
    )
    # External content: the index holds no text of its own, so triggers keep it in step.
    # (One statement at a time: executescript would commit the migration's transaction.)
    delete_old = (
        "INSERT INTO messages_trigram (messages_trigram, rowid, content) "
        "VALUES ('delete', old.id, old.content);"
    )
    insert_new = "INSERT INTO messages_trigram (rowid, content) VALUES (new.id, new.content);"
    for trigger in (
        f"messages_trigram_ai AFTER INSERT ON messages BEGIN {insert_new} END",
        f"messages_trigram_ad AFTER DELETE ON messages BEGIN {delete_old} END",
        f"messages_trigram_au AFTER UPDATE OF content ON messages BEGIN {delete_old} {insert_new} END",
    ):
        db.execute(f"CREATE TRIGGER {trigger}")
    db.execute("INSERT INTO messages_trigram (messages_trigram) VALUES ('rebuild')")


def _create_compactions(db: sqlite_utils.Database) -> None:
    """A compaction replaces, in what the model is sent, every message from the second up to
    (not including) `first_kept_id` by `summary`. The messages themselves stay."""
    db["compactions"].create(
        {
            "id": int,
            "conversation_id": int,
            "first_kept_id": int,
            "summary": str,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("conversation_id", "conversations", "id")],
    )
    db["compactions"].create_index(["conversation_id", "id"])


MIGRATIONS: list[Migration] = [
    ("001_conversations", _create_conversations),
    ("002_messages", _create_messages),
    ("003_messages_fts", _index_messages),
    ("004_messages_trigram", _index_messages_by_trigram),
    ("005_compactions", _create_compactions),
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


def has_cjk(text: str) -> bool:
    """True when text holds Chinese, Japanese or Korean characters (written without spaces)."""
    return _CJK.search(text) is not None


@dataclass(frozen=True)
class TextQuery:
    """A person's text made safe for one index: an FTS5 MATCH expression, plus terms too short
    for the trigram index, matched with LIKE."""

    index: SearchIndex
    match: str | None
    like_terms: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()

    @classmethod
    def build(cls, text: str, index: SearchIndex) -> TextQuery | None:
        """The query for `index`, or None when `text` holds nothing searchable."""
        if index == "words":
            match = fts_query(text)
            return cls("words", match, terms=tuple(text.split())) if match else None
        terms = [t.strip(_TERM_EDGES) for t in text.split()]
        terms = [t for t in terms if any(ch.isalnum() for ch in t)]
        long_terms = [t for t in terms if len(t) >= 3]
        short_terms = tuple(t for t in terms if len(t) < 3)
        if not terms:
            return None
        match = " AND ".join('"' + t.replace('"', '""') + '"' for t in long_terms) or None
        return cls("trigram", match, short_terms, tuple(terms))


@dataclass(frozen=True)
class MessageFilter:
    """Which messages count: roles, a UTC ISO time range [after, before), conversations."""

    roles: tuple[str, ...] = DEFAULT_ROLES
    after: str | None = None
    before: str | None = None
    exclude: tuple[int, ...] = ()
    conversation_id: int | None = None

    def sql(self, params: dict[str, Any]) -> list[str]:
        """WHERE conditions on `messages AS m`, their values added to params."""
        names = [f":role{i}" for i in range(len(self.roles))]
        params.update({f"role{i}": role for i, role in enumerate(self.roles)})
        conditions = [f"m.role IN ({', '.join(names) or 'NULL'})"]
        if "tool" not in self.roles:
            # Without tool output, a message that only called tools has nothing to show.
            conditions.append("m.content != ''")
        if self.after:
            conditions.append("m.created_at >= :after")
            params["after"] = self.after
        if self.before:
            conditions.append("m.created_at < :before")
            params["before"] = self.before
        if self.exclude:
            # Integers from our own parsing, never text: safe to inline.
            ids = ", ".join(str(int(i)) for i in self.exclude)
            conditions.append(f"m.conversation_id NOT IN ({ids})")
        if self.conversation_id is not None:
            conditions.append("m.conversation_id = :conversation_id")
            params["conversation_id"] = self.conversation_id
        return conditions


@dataclass(frozen=True)
class ConversationMatch:
    """A conversation with messages matching a query; `score` is its best bm25 (lower is better)."""

    conversation: Conversation
    score: float
    hits: int
    first_at: str
    last_at: str


@dataclass(frozen=True)
class StoredMessage:
    """A message as search shows it: `content` may be cut to a length; `length` is the whole."""

    id: int
    conversation_id: int
    role: str
    kind: str
    content: str
    length: int
    created_at: str
    tool_names: tuple[str, ...] = ()
    snippet: str | None = None


@dataclass(frozen=True)
class ConversationSummary:
    """A conversation and how many of its messages pass a filter."""

    conversation: Conversation
    messages: int
    first_at: str | None
    last_at: str | None


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _match_sql(query: TextQuery, params: dict[str, Any]) -> tuple[str, list[str], str, str]:
    """FROM clause, WHERE conditions, rank and snippet expressions for a text query."""
    conditions: list[str] = []
    for i, term in enumerate(query.like_terms):
        conditions.append(f"m.content LIKE :like{i} ESCAPE '\\'")
        params[f"like{i}"] = _like_pattern(term)
    if query.match is None:
        return "messages AS m", conditions, "0.0", "NULL"
    table = "messages_fts" if query.index == "words" else "messages_trigram"
    params["match"] = query.match
    conditions.insert(0, f"{table} MATCH :match")
    source = f"{table} JOIN messages AS m ON m.id = {table}.rowid"
    # The trigram tokenizer's snippets cut words apart; those are made in Python instead.
    snippet = f"snippet({table}, 0, '**', '**', '…', 16)" if query.index == "words" else "NULL"
    return source, conditions, f"{table}.rank", snippet


def plain_snippet(content: str, terms: tuple[str, ...], width: int = 160) -> str:
    """The text around the first term found (case ignored), terms marked with **…**."""
    lowered = content.lower()
    found = [(lowered.find(t.lower()), t) for t in terms if t and t.lower() in lowered]
    start = min((pos for pos, _ in found), default=0)
    begin = max(0, start - width // 3)
    piece = content[begin : begin + width]
    for _, term in sorted(found, key=lambda item: -len(item[1])):
        piece = re.sub(re.escape(term), lambda m: f"**{m.group(0)}**", piece, flags=re.I)
    return ("…" if begin else "") + piece + ("…" if begin + width < len(content) else "")


_MESSAGE_COLUMNS = (
    "m.id, m.conversation_id, m.role, m.kind, substr(m.content, 1, :chars) AS content, "
    "length(m.content) AS length, m.created_at, m.tool_calls"
)


def _stored_message(row: dict[str, Any], snippet: str | None = None) -> StoredMessage:
    calls = json.loads(row["tool_calls"] or "[]")
    return StoredMessage(
        id=row["id"],
        conversation_id=row["conversation_id"],
        role=row["role"],
        kind=row["kind"],
        content=row["content"] or "",
        length=row["length"] or 0,
        created_at=row["created_at"],
        tool_names=tuple(call["name"] for call in calls),
        snippet=snippet,
    )


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
        id=row.get("id"),
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

    async def record_compaction(
        self, conversation_id: int, first_kept_id: int, summary: str
    ) -> None:
        row = {
            "conversation_id": conversation_id,
            "first_kept_id": first_kept_id,
            "summary": summary,
            "created_at": utc_now_iso(),
        }
        await self.db.call(lambda db: db["compactions"].insert(row))

    async def last_compaction(self, conversation_id: int) -> tuple[int, str] | None:
        """(first kept message id, summary) of the conversation's latest compaction."""

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(
                db.query(
                    "SELECT first_kept_id, summary FROM compactions WHERE conversation_id = ? "
                    "ORDER BY id DESC LIMIT 1",
                    [conversation_id],
                )
            )

        rows = await self.db.call(select)
        return (rows[0]["first_kept_id"], rows[0]["summary"]) if rows else None

    async def history(self, conversation_id: int) -> list[Message]:
        """Every message of a conversation, oldest first, as provider messages."""

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(
                db.query(
                    "SELECT id, role, content, tool_calls, tool_call_id, name, images "
                    "FROM messages WHERE conversation_id = ? ORDER BY id",
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

    async def match_conversations(
        self, query: TextQuery, where: MessageFilter, *, sort: SearchSort, limit: int
    ) -> list[ConversationMatch]:
        """Conversations holding messages that match, best (or newest, or oldest) first."""
        params: dict[str, Any] = {"limit": limit}
        source, conditions, rank, _ = _match_sql(query, params)
        conditions += where.sql(params)
        order = {
            "relevance": "score, hits DESC, last_id DESC",
            "newest": "last_id DESC",
            "oldest": "first_id",
        }[sort]
        sql = (
            f"SELECT m.conversation_id, MIN({rank}) AS score, COUNT(*) AS hits, "
            "MIN(m.created_at) AS first_at, MAX(m.created_at) AS last_at, "
            "MIN(m.id) AS first_id, MAX(m.id) AS last_id "
            f"FROM {source} WHERE {' AND '.join(conditions)} "
            f"GROUP BY m.conversation_id ORDER BY {order} LIMIT :limit"
        )

        def select(db: sqlite_utils.Database) -> list[ConversationMatch]:
            rows = list(db.query(sql, params))
            found = self._conversations(db, [row["conversation_id"] for row in rows])
            return [
                ConversationMatch(
                    found[row["conversation_id"]],
                    row["score"],
                    row["hits"],
                    row["first_at"],
                    row["last_at"],
                )
                for row in rows
            ]

        return await self.db.call(select)

    @staticmethod
    def _conversations(db: sqlite_utils.Database, ids: list[int]) -> dict[int, Conversation]:
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = db.query(f"SELECT * FROM conversations WHERE id IN ({marks})", ids)
        return {row["id"]: Conversation(**row) for row in rows}

    async def matching_messages(
        self, query: TextQuery, where: MessageFilter, *, limit: int, chars: int = 2000
    ) -> list[StoredMessage]:
        """The messages of one conversation (`where.conversation_id`) that match, best first."""
        if where.conversation_id is None:
            raise ValueError("matching_messages needs where.conversation_id")
        params: dict[str, Any] = {"limit": limit, "chars": chars}
        source, conditions, rank, snippet = _match_sql(query, params)
        conditions += where.sql(params)
        if query.match is not None:
            # A rowid range lets FTS5 skip the matches of every other conversation.
            table = source.split()[0]
            conditions += [f"{table}.rowid >= :low", f"{table}.rowid <= :high"]
        sql = (
            f"SELECT {_MESSAGE_COLUMNS}, {snippet} AS snippet FROM {source} "
            f"WHERE {' AND '.join(conditions)} ORDER BY {rank}, m.id LIMIT :limit"
        )

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            low, high = db.execute(
                "SELECT MIN(id), MAX(id) FROM messages WHERE conversation_id = ?",
                [where.conversation_id],
            ).fetchone()
            if low is None:
                return []
            return list(db.query(sql, {**params, "low": low, "high": high}))

        rows = await self.db.call(select)
        return [
            _stored_message(row, row["snippet"] or plain_snippet(row["content"], query.terms))
            for row in rows
        ]

    async def read_messages(
        self,
        where: MessageFilter,
        *,
        limit: int,
        offset: int = 0,
        after_id: int | None = None,
        before_id: int | None = None,
        newest_first: bool = False,
        chars: int = 2000,
    ) -> list[StoredMessage]:
        """Messages of one conversation in id order (or newest first), each cut to `chars`."""
        if where.conversation_id is None:
            raise ValueError("read_messages needs where.conversation_id")
        params: dict[str, Any] = {"limit": limit, "offset": offset, "chars": chars}
        conditions = where.sql(params)
        if after_id is not None:
            conditions.append("m.id > :after_id")
            params["after_id"] = after_id
        if before_id is not None:
            conditions.append("m.id < :before_id")
            params["before_id"] = before_id
        sql = (
            f"SELECT {_MESSAGE_COLUMNS} FROM messages AS m WHERE {' AND '.join(conditions)} "
            f"ORDER BY m.id {'DESC' if newest_first else ''} LIMIT :limit OFFSET :offset"
        )

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(db.query(sql, params))

        return [_stored_message(row) for row in await self.db.call(select)]

    async def get_message(self, message_id: int, *, chars: int = 2000) -> StoredMessage | None:
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages AS m WHERE m.id = :id"

        def select(db: sqlite_utils.Database) -> dict[str, Any] | None:
            return next(db.query(sql, {"id": message_id, "chars": chars}), None)

        row = await self.db.call(select)
        return _stored_message(row) if row else None

    async def summarise_conversations(
        self, where: MessageFilter, *, sort: SearchSort, limit: int, ids: list[int] | None = None
    ) -> list[ConversationSummary]:
        """Conversations with messages passing `where` (or those of `ids`), latest first unless
        sort is oldest; with the count, first and last time of those messages."""
        params: dict[str, Any] = {"limit": limit}
        conditions = ["m.conversation_id = c.id", *where.sql(params)]
        # The time range is checked on the conversation first: cheap, and it bounds the scan.
        outer = []
        if where.after:
            outer.append("c.updated_at >= :after")
        if where.before:
            outer.append("c.created_at < :before")
        if ids is not None:
            outer.append(f"c.id IN ({', '.join(str(int(i)) for i in ids) or 'NULL'})")
        stats = f"FROM messages AS m WHERE {' AND '.join(conditions)}"
        order = "c.created_at, c.id" if sort == "oldest" else "c.updated_at DESC, c.id DESC"
        sql = (
            f"SELECT c.*, (SELECT COUNT(*) {stats}) AS n, (SELECT MIN(m.created_at) {stats}) "
            f"AS first_at, (SELECT MAX(m.created_at) {stats}) AS last_at FROM conversations AS c "
            f"WHERE {' AND '.join([*outer, f'EXISTS (SELECT 1 {stats})'])} "
            f"ORDER BY {order} LIMIT :limit"
        )

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(db.query(sql, params))

        summaries = []
        for row in await self.db.call(select):
            counts = {key: row.pop(key) for key in ("n", "first_at", "last_at")}
            summaries.append(
                ConversationSummary(
                    Conversation(**row), counts["n"], counts["first_at"], counts["last_at"]
                )
            )
        return summaries

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
