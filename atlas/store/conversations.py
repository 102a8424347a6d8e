"""A bot's conversations and messages in `bots/<name>/conversations.db`, searchable by FTS5.

The tables live in atlas/store/conversation_schema.py, the search queries in atlas/store/search.py;
their public names are importable from here too.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, get_args

import sqlite_utils

from atlas.errors import AtlasError
from atlas.providers.base import Message, Usage
from atlas.store import search as queries
from atlas.store.conversation_schema import (
    FTS_TOKENIZE,
    MIGRATIONS,
    TRIGRAM_TOKENIZE,
    Conversation,
    ConversationKind,
    MessageKind,
)
from atlas.store.db import (
    Database,
    fetch_dicts,
    insert_dict,
    utc_now_iso,
    write_transaction,
)
from atlas.store.history_cache import (
    Compaction,
    HistoryCache,
    history_rows,
    last_compaction,
    message_from_row,
    read_history,
)
from atlas.store.message_index import index_pending_messages, unindexed_messages
from atlas.store.search import (
    DEFAULT_ROLES,
    ConversationMatch,
    ConversationSummary,
    MessageFilter,
    SearchHit,
    SearchIndex,
    SearchSort,
    StoredMessage,
    TextQuery,
    fts_query,
    has_cjk,
    plain_snippet,
)

__all__ = [
    "DEFAULT_ROLES",
    "FTS_TOKENIZE",
    "MIGRATIONS",
    "TRIGRAM_TOKENIZE",
    "Conversation",
    "ConversationKind",
    "ConversationMatch",
    "ConversationStore",
    "ConversationSummary",
    "MessageFilter",
    "MessageKind",
    "SearchHit",
    "SearchIndex",
    "SearchSort",
    "StoredMessage",
    "TextQuery",
    "fts_query",
    "has_cjk",
    "plain_snippet",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


_SELECT_CONVERSATION = (
    "SELECT * FROM conversations WHERE channel = :channel AND chat = :chat "
    "AND thread = :thread AND user = :user"
)
# One statement, so atomic: a platform event already stored in any of the bot's conversations
# is not stored again (a retry after a restart or `!new`), nor twice in one (the unique index).
_INSERT_MESSAGE = (
    "INSERT INTO messages (conversation_id, role, content, tool_calls, tool_call_id, name, "
    "images, usage, model, event_id, kind, answers_upto, created_at) "
    "SELECT :conversation_id, :role, :content, :tool_calls, :tool_call_id, :name, :images, "
    ":usage, :model, :event_id, :kind, :answers_upto, :now "
    "WHERE :event_id IS NULL OR NOT EXISTS (SELECT 1 FROM messages WHERE event_id = :event_id) "
    "ON CONFLICT (conversation_id, event_id) WHERE event_id IS NOT NULL DO NOTHING"
)


def _json_or_none(items: list[dict[str, Any]] | dict[str, Any] | None) -> str | None:
    return json.dumps(items, ensure_ascii=False) if items else None


class ConversationStore:
    """A bot's conversation store; open it before use (or use it as an async context manager)."""

    def __init__(self, path: Path) -> None:
        self.db = Database(path, MIGRATIONS, upkeep=index_pending_messages)
        self.histories = HistoryCache()

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
            # Read first: a conversation is made once and read on every first contact after.
            # No transaction: the INSERT makes the row or finds it made, atomically by itself.
            found = fetch_dicts(db, _SELECT_CONVERSATION, key)
            if found:
                return found[0]
            now = utc_now_iso()
            made = fetch_dicts(
                db,
                "INSERT INTO conversations "
                "(bot, channel, chat, thread, user, kind, title, created_at, updated_at) "
                "VALUES (:bot, :channel, :chat, :thread, :user, :kind, :title, :now, :now) "
                "ON CONFLICT (channel, chat, thread, user) DO NOTHING RETURNING *",
                {**key, "bot": bot, "kind": kind, "title": title, "now": now},
            )
            # Nothing returned: another process made it between the two statements.
            return (made or fetch_dicts(db, _SELECT_CONVERSATION, key))[0]

        return Conversation(**await self.db.quick(get_or_create))

    async def get_conversation(self, conversation_id: int) -> Conversation | None:
        def get(db: sqlite_utils.Database) -> dict[str, Any] | None:
            rows = fetch_dicts(db, "SELECT * FROM conversations WHERE id = ?", [conversation_id])
            return rows[0] if rows else None

        row = await self.db.quick(get)
        return Conversation(**row) if row else None

    async def thread_known(self, channel: str, chat: str, thread: str) -> bool:
        """Whether a conversation is stored for this thread of the chat (any `/new`
        generation of it: `chat` or `chat#N`)."""

        def find(db: sqlite_utils.Database) -> bool:
            rows = db.query(
                "SELECT 1 FROM conversations WHERE channel = ? AND thread = ? "
                "AND (chat = ? OR chat LIKE ? || '#%')",
                [channel, thread, chat, chat],
            )
            return next(iter(rows), None) is not None

        return await self.db.call(find)

    async def append(
        self,
        conversation_id: int,
        message: Message,
        *,
        usage: Usage | None = None,
        model: str | None = None,
        event_id: str | None = None,
        kind: MessageKind = "message",
        answers_upto: int | None = None,
        unless_user_after: int | None = None,
        also: Callable[[sqlite_utils.Database, int], object] | None = None,
    ) -> int | None:
        """Store a message and return its id; None when `event_id` is already stored in this
        conversation (a platform redelivered an event), or when `unless_user_after` is given
        and a person's message newer than that id is stored. `also`: more to write in the
        same transaction, given the new message's id (the outbox rows that deliver an
        answer: atlas/outbox/rows.py `Outgoing`), so an answer is never stored without them."""
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
            "answers_upto": answers_upto,
        }

        def store_row(db: sqlite_utils.Database) -> int | None:
            # The trigger of migration 012 moves the conversation's `updated_at` in the same
            # statement, so a message alone is one INSERT that commits itself.
            try:
                cursor = db.conn.execute(_INSERT_MESSAGE, {**row, "now": utc_now_iso()})
            except sqlite3.IntegrityError as exc:
                # The foreign key names a missing conversation: no SELECT needed before.
                if "FOREIGN KEY" not in str(exc):
                    raise
                raise AtlasError(f"{self.path}: no conversation with id {conversation_id}") from exc
            return cursor.lastrowid if cursor.rowcount else None  # 0: its event was stored before

        def insert(db: sqlite_utils.Database) -> int | None:
            if unless_user_after is None and also is None:
                return store_row(db)
            with write_transaction(db):
                if (
                    unless_user_after is not None
                    and db.conn.execute(
                        "SELECT 1 FROM messages WHERE conversation_id = ? AND role = 'user' "
                        "AND id > ? LIMIT 1",
                        [conversation_id, unless_user_after],
                    ).fetchone()
                ):
                    return None
                message_id = store_row(db)
                if message_id is not None and also is not None:
                    also(db, message_id)
                return message_id

        return await self.db.quick(insert)

    async def newest_user_message_id(self, conversation_id: int) -> int | None:
        def newest(db: sqlite_utils.Database) -> int | None:
            row = db.execute(
                "SELECT MAX(id) FROM messages WHERE conversation_id = ? AND role = 'user'",
                [conversation_id],
            ).fetchone()
            return row[0]

        return await self.db.quick(newest)

    async def record_compaction(
        self, conversation_id: int, first_kept_id: int, summary: str
    ) -> None:
        row = {
            "conversation_id": conversation_id,
            "first_kept_id": first_kept_id,
            "summary": summary,
            "created_at": utc_now_iso(),
        }
        await self.db.quick(lambda db: insert_dict(db, "compactions", row))

    async def last_compaction(self, conversation_id: int) -> Compaction | None:
        """(first kept message id, summary) of the conversation's latest compaction."""
        return await self.db.quick(partial(last_compaction, conversation_id=conversation_id))

    async def history(self, conversation_id: int) -> list[Message]:
        """Every message of a conversation, oldest first, as provider messages."""
        rows = await self.db.call(partial(history_rows, conversation_id=conversation_id))
        return [message_from_row(row) for row in rows]

    async def history_and_compaction(
        self, conversation_id: int
    ) -> tuple[list[Message], Compaction | None]:
        """The latest compaction and the messages a turn needs: after a compaction, only the
        first message and those it kept, not the whole stored conversation (a long chat's
        would grow the cost of every turn without end). Messages read before are kept
        (`HistoryCache`): one store call reads the compaction and only the newer rows."""
        known = self.histories.known(conversation_id)
        read = await self.db.quick(
            partial(read_history, conversation_id=conversation_id, known=known)
        )
        messages = self.histories.apply(conversation_id, read)
        if messages is None:  # a compaction came between: read it all
            self.histories.forget(conversation_id)
            read = await self.db.quick(
                partial(read_history, conversation_id=conversation_id, known=None)
            )
            messages = self.histories.apply(conversation_id, read) or []
        return messages, read.compaction

    async def _indexed(self, read: Callable[..., T], **arguments: Any) -> T:
        """`read` with `arguments` on a reader connection (never on the writer's thread: a
        search must not hold up another conversation's append), after the writer has indexed
        what is pending, so it sees every message (or, where the file cannot be written, every
        message indexed so far)."""
        if await self.db.read(unindexed_messages):
            try:
                await self.db.quick(index_pending_messages)
            except sqlite3.OperationalError as exc:  # a read-only file, a lock held too long
                log.warning(
                    "%s: could not index the newest messages (%s); searching without them",
                    self.path,
                    exc,
                )
        return await self.db.read(partial(read, **arguments))

    async def search(
        self, query: str, *, limit: int = 20, conversation_id: int | None = None
    ) -> list[SearchHit]:
        """Messages matching every word of `query` (stemmed, accents ignored), best first."""
        match = fts_query(query)
        if match is None or limit <= 0:
            return []
        return await self._indexed(
            queries.search_messages, match=match, limit=limit, conversation_id=conversation_id
        )

    async def match_conversations(
        self, query: TextQuery, where: MessageFilter, *, sort: SearchSort, limit: int
    ) -> list[ConversationMatch]:
        """Conversations holding messages that match, best (or newest, or oldest) first."""
        return await self._indexed(
            queries.match_conversations, query=query, where=where, sort=sort, limit=limit
        )

    async def matching_messages(
        self, query: TextQuery, where: MessageFilter, *, limit: int, chars: int = 2000
    ) -> list[StoredMessage]:
        """The messages of one conversation (`where.conversation_id`) that match, best first."""
        return await self._indexed(
            queries.matching_messages, query=query, where=where, limit=limit, chars=chars
        )

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
        read = partial(
            queries.read_messages,
            where=where,
            limit=limit,
            offset=offset,
            after_id=after_id,
            before_id=before_id,
            newest_first=newest_first,
            chars=chars,
        )
        return await self.db.read(read)

    async def get_message(self, message_id: int, *, chars: int = 2000) -> StoredMessage | None:
        read = partial(queries.get_message, message_id=message_id, chars=chars)
        return await self.db.quick(read)

    async def summarise_conversations(
        self, where: MessageFilter, *, sort: SearchSort, limit: int, ids: list[int] | None = None
    ) -> list[ConversationSummary]:
        """Conversations with messages passing `where` (or those of `ids`), latest first unless
        sort is oldest; with the count, first and last time of those messages."""
        return await self.db.read(
            partial(queries.summarise_conversations, where=where, sort=sort, limit=limit, ids=ids)
        )

    async def usage_totals(self, conversation_id: int) -> Usage:
        """The sum of the usage recorded on a conversation's messages."""
        names = [f.name for f in fields(Usage)]
        # Field names come from our own dataclass, never from input, so formatting them is safe.
        sums = ", ".join(
            f"COALESCE(SUM(json_extract(usage, '$.{name}')), 0) AS {name}" for name in names
        )
        sql = f"SELECT {sums} FROM messages WHERE conversation_id = ? AND usage IS NOT NULL"

        def select(db: sqlite_utils.Database) -> dict[str, Any]:
            return fetch_dicts(db, sql, [conversation_id])[0]

        row = await self.db.call(select)
        return Usage(**{name: int(row[name]) for name in names})
