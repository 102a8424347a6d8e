"""A bot's conversations in the home's PostgreSQL database: the same calls as the SQLite file's
ConversationStore (atlas/store/engine.py names them), on asyncpg.

Every bot shares the tables; each row carries its bot, and a store only ever reads and writes
its own bot's rows, as a bot's SQLite file holds only its own.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import fields
from types import TracebackType
from typing import Any, NoReturn, get_args

import asyncpg

from atlas.errors import AtlasError, NotOnPostgres
from atlas.outbox.rows import Outgoing
from atlas.providers.base import Message, Usage
from atlas.store.conversation_schema import Conversation, ConversationKind, MessageKind
from atlas.store.db import utc_now_iso
from atlas.store.history_cache import Compaction, message_from_row
from atlas.store.pg.server import PgServer
from atlas.store.pg.text import (
    WORDS_CONFIG,
    like_pattern,
    substring_terms,
    words_terms,
    words_text,
    words_tsquery,
    words_vector,
)
from atlas.store.search import (
    ConversationMatch,
    ConversationSummary,
    MessageFilter,
    SearchHit,
    SearchSort,
    StoredMessage,
    TextQuery,
    plain_snippet,
)

PgAlso = Callable[[asyncpg.Connection, int], Awaitable[None]]
"""Written with a stored message, in its transaction: given the connection and its id."""

_CONVERSATION_COLUMNS = (
    'id, bot, channel, chat, thread, "user", kind, title, created_at, updated_at'
)
# The message, and its conversation's `updated_at` moved, in one statement and one round trip
# (SQLite does it with a trigger): nothing is stored unless the conversation is this bot's,
# and a platform event already stored for this bot is not stored again.
_INSERT_MESSAGE = (
    "WITH stored AS (INSERT INTO messages (bot, conversation_id, role, content, tool_calls, "
    "tool_call_id, name, images, usage, model, event_id, kind, answers_upto, created_at, words) "
    "SELECT $1, c.id, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::bigint, $14, "
    f"{words_vector('$15')} FROM conversations AS c WHERE c.id = $2 AND c.bot = $1 "
    "ON CONFLICT (bot, event_id) WHERE event_id IS NOT NULL DO NOTHING "
    "RETURNING id, conversation_id, created_at), "
    "touched AS (UPDATE conversations SET updated_at = stored.created_at FROM stored "
    "WHERE conversations.id = stored.conversation_id) "
    "SELECT id FROM stored"
)
_NO_SCORE = "0.0"
_HEADLINE_OPTIONS = "StartSel=**, StopSel=**, MaxWords=16, MinWords=6, ShortWord=1"


def _json_or_none(items: list[dict[str, Any]] | dict[str, Any] | None) -> str | None:
    return json.dumps(items, ensure_ascii=False) if items else None


def _conversation(row: asyncpg.Record) -> Conversation:
    return Conversation(**dict(row))


class PgConversationStore:
    """One bot's conversations on a shared, open PgServer (the server outlives its stores)."""

    def __init__(self, server: PgServer, bot: str) -> None:
        self.server = server
        self.bot = bot

    @property
    def path(self) -> str:
        """Where the conversations live, for messages (a SQLite store's is its file)."""
        return f"{self.server.where} (bot {self.bot})"

    @property
    def db(self) -> NoReturn:
        """The SQLite store's database, for its own SQL: not on PostgreSQL (a clear error
        where a caller not behind the seam yet reaches for it)."""
        raise NotOnPostgres(f"bot {self.bot}'s conversations.db SQL", self.server.where)

    async def open(self) -> None:
        await self.server.open()

    async def close(self) -> None:
        """Nothing of its own to close: the pool belongs to the server."""

    async def __aenter__(self) -> PgConversationStore:
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
        """The conversation for channel + chat + thread + user, created on first use."""
        if kind not in get_args(ConversationKind):
            raise ValueError(
                f"conversation kind {kind!r} is not one of {get_args(ConversationKind)}"
            )
        if bot != self.bot:
            raise ValueError(f"bot {self.bot!r}'s store cannot hold bot {bot!r}'s conversations")
        key = (self.bot, channel, chat, thread or "", user or "")
        select = (
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE bot = $1 AND channel = $2 "
            'AND chat = $3 AND thread = $4 AND "user" = $5'
        )
        pool = self.server.pool
        found = await pool.fetchrow(select, *key)
        if found is None:
            now = utc_now_iso()
            found = await pool.fetchrow(
                'INSERT INTO conversations (bot, channel, chat, thread, "user", kind, title, '
                "created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) "
                f"ON CONFLICT DO NOTHING RETURNING {_CONVERSATION_COLUMNS}",
                *key,
                kind,
                title,
                now,
            )
            # Nothing returned: another process made it between the two statements.
            found = found or await pool.fetchrow(select, *key)
        return _conversation(found)

    async def get_conversation(self, conversation_id: int) -> Conversation | None:
        row = await self.server.pool.fetchrow(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = $1 AND bot = $2",
            conversation_id,
            self.bot,
        )
        return _conversation(row) if row else None

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
        created_at: str | None = None,
        also: PgAlso | Outgoing | None = None,
    ) -> int | None:
        """Store a message and return its id; None when `event_id` is already stored for this
        bot, or when `unless_user_after` is given and a person's message newer than that id is
        stored. `created_at`: the time to record (a copy keeps the original's); default now.
        `also(conn, message_id)` runs in the message's transaction when it is stored: the rows
        that deliver it (atlas/store/pg/outbox.py `written_with`), as the SQLite store's `also`;
        an `Outgoing` (what the tool loop hands either engine) is written by `written_with`."""
        if kind not in get_args(MessageKind):
            raise ValueError(f"message kind {kind!r} is not one of {get_args(MessageKind)}")
        data = message.to_dict()
        content = message.content or ""
        values = (
            self.bot,
            conversation_id,
            message.role,
            content,
            _json_or_none(data.get("tool_calls")),
            message.tool_call_id,
            message.name,
            _json_or_none(data.get("images")),
            _json_or_none(usage.to_dict() if usage else None),
            model,
            event_id,
            kind,
            answers_upto,
            created_at or utc_now_iso(),
            words_text(content),
        )
        if isinstance(also, Outgoing):
            from atlas.store.pg.outbox import written_with

            also = written_with(also)
        async with self.server.pool.acquire() as conn:
            if also is None:
                stored = await self._insert(conn, values, unless_user_after)
            else:
                async with conn.transaction():  # the message and its outbox rows, or neither
                    stored = await self._insert(conn, values, unless_user_after)
                    if stored is not None:
                        await also(conn, stored)
            if stored is None:  # a redelivered event, a newer message, or no such conversation
                await self._check_owner(conn, conversation_id)
            return stored

    async def _insert(
        self, conn: asyncpg.Connection, values: tuple[Any, ...], unless_user_after: int | None
    ) -> int | None:
        conversation_id = values[1]
        if unless_user_after is None:
            return await conn.fetchval(_INSERT_MESSAGE, *values)
        async with conn.transaction():
            # The conversation's row locked: two appends to it take turns here.
            await conn.execute(
                "SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE", conversation_id
            )
            newer = await conn.fetchval(
                "SELECT 1 FROM messages WHERE conversation_id = $1 AND role = 'user' "
                "AND id > $2 LIMIT 1",
                conversation_id,
                unless_user_after,
            )
            if newer:
                return None
            return await conn.fetchval(_INSERT_MESSAGE, *values)

    async def _check_owner(self, conn: asyncpg.Connection, conversation_id: int) -> None:
        owner = await conn.fetchval("SELECT bot FROM conversations WHERE id = $1", conversation_id)
        if owner is None:
            raise AtlasError(f"{self.path}: no conversation with id {conversation_id}")
        if owner != self.bot:
            raise AtlasError(
                f"{self.path}: conversation {conversation_id} belongs to bot {owner!r}"
            )

    async def last_messages(self, since: str) -> list[dict[str, Any]]:
        """For a start's recovery (atlas/recovery.py): each person-facing conversation of this
        bot updated since `since`, with its last message and its latest user message: the
        columns of the SQLite query there, the same rows."""
        rows = await self.server.pool.fetch(_LAST_MESSAGES, self.bot, since)
        return [dict(row) for row in rows]

    async def newest_user_message_id(self, conversation_id: int) -> int | None:
        return await self.server.pool.fetchval(
            "SELECT MAX(id) FROM messages WHERE conversation_id = $1 AND role = 'user' "
            "AND bot = $2",
            conversation_id,
            self.bot,
        )

    async def record_compaction(
        self, conversation_id: int, first_kept_id: int, summary: str
    ) -> None:
        await self.server.pool.execute(
            "INSERT INTO compactions (conversation_id, first_kept_id, summary, created_at) "
            "VALUES ($1, $2, $3, $4)",
            conversation_id,
            first_kept_id,
            summary,
            utc_now_iso(),
        )

    async def last_compaction(self, conversation_id: int) -> Compaction | None:
        row = await self.server.pool.fetchrow(
            "SELECT first_kept_id, summary FROM compactions WHERE conversation_id = $1 "
            "ORDER BY id DESC LIMIT 1",
            conversation_id,
        )
        return (row[0], row[1]) if row else None

    async def history(self, conversation_id: int) -> list[Message]:
        """Every message of a conversation, oldest first, as provider messages."""
        rows = await self.server.pool.fetch(
            "SELECT id, role, content, tool_calls, tool_call_id, name, images, answers_upto "
            "FROM messages WHERE conversation_id = $1 AND bot = $2 ORDER BY id",
            conversation_id,
            self.bot,
        )
        return [message_from_row(tuple(row)) for row in rows]  # type: ignore[arg-type]

    async def thread_known(self, channel: str, chat: str, thread: str) -> bool:
        """Whether a conversation of this bot is stored for this thread of the chat (any
        `/new` generation of it: `chat` or `chat#N`), as the SQLite store's."""
        found = await self.server.pool.fetchval(
            "SELECT 1 FROM conversations WHERE bot = $1 AND channel = $2 AND thread = $3 "
            "AND (chat = $4 OR chat LIKE $5) LIMIT 1",
            self.bot,
            channel,
            thread,
            chat,
            chat.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "#%",
        )
        return found is not None

    async def history_and_compaction(
        self, conversation_id: int
    ) -> tuple[list[Message], Compaction | None]:
        """The latest compaction and the messages a turn needs, as the SQLite store's: after
        a compaction only the first message and those it kept (from `first_kept_id` on), not
        the whole conversation. Both read in one snapshot."""
        columns = "id, role, content, tool_calls, tool_call_id, name, images, answers_upto"
        async with (
            self.server.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            found = await conn.fetchrow(
                "SELECT first_kept_id, summary FROM compactions WHERE conversation_id = $1 "
                "ORDER BY id DESC LIMIT 1",
                conversation_id,
            )
            if found is None:
                rows = await conn.fetch(
                    f"SELECT {columns} FROM messages WHERE conversation_id = $1 AND bot = $2 "
                    "ORDER BY id",
                    conversation_id,
                    self.bot,
                )
            else:
                rows = await conn.fetch(
                    f"SELECT {columns} FROM messages WHERE conversation_id = $1 AND bot = $2 "
                    "AND (id >= $3 OR id = (SELECT MIN(id) FROM messages "
                    "WHERE conversation_id = $1)) ORDER BY id",
                    conversation_id,
                    self.bot,
                    found[0],
                )
        messages = [message_from_row(tuple(row)) for row in rows]  # type: ignore[arg-type]
        return messages, ((found[0], found[1]) if found else None)

    async def search(
        self, query: str, *, limit: int = 20, conversation_id: int | None = None
    ) -> list[SearchHit]:
        """Messages matching every word of `query` (stemmed, accents ignored), best first."""
        terms = words_terms(query)
        if not terms or limit <= 0:
            return []
        params: list[Any] = [self.bot]
        within = ""
        if conversation_id is not None:
            within = f" AND m.conversation_id = ${_add(params, conversation_id)}"
        tsquery, values = words_tsquery(terms, len(params) + 1)
        params.extend(values)
        sql = (
            f"SELECT m.id AS message_id, m.conversation_id, m.role, "
            f"ts_headline('{WORDS_CONFIG}', m.content, q, '{_HEADLINE_OPTIONS}') AS snippet, "
            f"m.created_at FROM messages AS m, (SELECT {tsquery}) AS found(q) "
            f"WHERE m.bot = $1{within} AND m.words @@ q "
            f"ORDER BY ts_rank(m.words, q) DESC, m.id LIMIT {int(limit)}"
        )
        rows = await self.server.pool.fetch(sql, *params)
        return [SearchHit(**dict(row)) for row in rows]

    def _text_match(self, query: TextQuery, params: list[Any]) -> tuple[list[str], str, str]:
        """WHERE conditions, a score (lower is better, as bm25's) and a snippet expression
        for a text query; the values are appended to `params`."""
        if query.index == "words":
            terms = words_terms(" ".join(query.terms))
            tsquery, values = words_tsquery(terms, len(params) + 1)
            params.extend(values)
            return (
                [f"m.words @@ ({tsquery})"],
                f"-ts_rank(m.words, {tsquery})",
                f"ts_headline('{WORDS_CONFIG}', m.content, {tsquery}, '{_HEADLINE_OPTIONS}')",
            )
        conditions = []
        for term in substring_terms(query):
            params.append(like_pattern(term))
            conditions.append(f"m.content ILIKE ${len(params)}")
        return conditions, _NO_SCORE, "NULL"

    def _filter(self, where: MessageFilter, params: list[Any]) -> list[str]:
        """The SQLite filter's conditions, its named values turned into numbered ones."""
        named: dict[str, Any] = {}
        conditions = [f"m.bot = ${_add(params, self.bot)}"]
        for condition in where.sql(named):
            for name in sorted(named, key=len, reverse=True):  # :role10 before :role1
                if f":{name}" in condition:
                    condition = condition.replace(f":{name}", f"${_add(params, named[name])}")
            conditions.append(condition)
        return conditions

    async def match_conversations(
        self, query: TextQuery, where: MessageFilter, *, sort: SearchSort, limit: int
    ) -> list[ConversationMatch]:
        """Conversations holding messages that match, best (or newest, or oldest) first."""
        params: list[Any] = []
        conditions, score, _ = self._text_match(query, params)
        conditions += self._filter(where, params)
        order = {
            "relevance": "score, hits DESC, last_id DESC",
            "newest": "last_id DESC",
            "oldest": "first_id",
        }[sort]
        sql = (
            f"SELECT m.conversation_id, MIN({score}) AS score, COUNT(*) AS hits, "
            "MIN(m.created_at) AS first_at, MAX(m.created_at) AS last_at, "
            "MIN(m.id) AS first_id, MAX(m.id) AS last_id "
            f"FROM messages AS m WHERE {' AND '.join(conditions)} "
            f"GROUP BY m.conversation_id ORDER BY {order} LIMIT {int(limit)}"
        )
        async with self.server.pool.acquire() as conn:
            rows = await conn.fetch(sql, *params)
            found = {
                row["id"]: _conversation(row)
                for row in await conn.fetch(
                    f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = ANY($1)",
                    [row["conversation_id"] for row in rows],
                )
            }
        return [
            ConversationMatch(
                found[row["conversation_id"]],
                float(row["score"]),
                row["hits"],
                row["first_at"],
                row["last_at"],
            )
            for row in rows
        ]

    async def matching_messages(
        self, query: TextQuery, where: MessageFilter, *, limit: int, chars: int = 2000
    ) -> list[StoredMessage]:
        """The messages of one conversation (`where.conversation_id`) that match, best first."""
        if where.conversation_id is None:
            raise ValueError("matching_messages needs where.conversation_id")
        params: list[Any] = []
        conditions, score, snippet = self._text_match(query, params)
        conditions += self._filter(where, params)
        chars_at = _add(params, chars)
        # No score for substrings (a constant may not lead an ORDER BY): oldest first.
        order = "m.id" if score == _NO_SCORE else f"{score}, m.id"
        sql = (
            f"SELECT {_message_columns(chars_at)}, "
            f"{snippet} AS snippet FROM messages AS m WHERE {' AND '.join(conditions)} "
            f"ORDER BY {order} LIMIT {int(limit)}"
        )
        rows = await self.server.pool.fetch(sql, *params)
        return [_stored_message(row, query) for row in rows]

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
        params: list[Any] = []
        conditions = self._filter(where, params)
        if after_id is not None:
            conditions.append(f"m.id > ${_add(params, after_id)}")
        if before_id is not None:
            conditions.append(f"m.id < ${_add(params, before_id)}")
        sql = (
            f"SELECT {_message_columns(_add(params, chars))}, NULL AS snippet "
            f"FROM messages AS m WHERE {' AND '.join(conditions)} "
            f"ORDER BY m.id {'DESC' if newest_first else ''} "
            f"LIMIT {int(limit)} OFFSET {int(offset)}"
        )
        return [_stored_message(row) for row in await self.server.pool.fetch(sql, *params)]

    async def get_message(self, message_id: int, *, chars: int = 2000) -> StoredMessage | None:
        row = await self.server.pool.fetchrow(
            f"SELECT {_message_columns(3)}, NULL AS snippet FROM messages AS m "
            "WHERE m.id = $1 AND m.bot = $2",
            message_id,
            self.bot,
            chars,
        )
        return _stored_message(row) if row else None

    async def summarise_conversations(
        self, where: MessageFilter, *, sort: SearchSort, limit: int, ids: list[int] | None = None
    ) -> list[ConversationSummary]:
        """Conversations with messages passing `where` (or those of `ids`), latest first unless
        sort is oldest; with the count, first and last time of those messages."""
        params: list[Any] = []
        conditions = ["m.conversation_id = c.id", *self._filter(where, params)]
        outer = [f"c.bot = ${_add(params, self.bot)}"]
        if where.after:
            outer.append(f"c.updated_at >= ${_add(params, where.after)}")
        if where.before:
            outer.append(f"c.created_at < ${_add(params, where.before)}")
        if ids is not None:
            outer.append(f"c.id = ANY(${_add(params, [int(i) for i in ids])}::bigint[])")
        order = "c.created_at, c.id" if sort == "oldest" else "c.updated_at DESC, c.id DESC"
        columns = ", ".join(f"c.{name}" for name in _CONVERSATION_COLUMNS.split(", "))
        sql = (
            f"SELECT {columns}, s.n, s.first_at, s.last_at FROM conversations AS c "
            "CROSS JOIN LATERAL (SELECT COUNT(*) AS n, MIN(m.created_at) AS first_at, "
            f"MAX(m.created_at) AS last_at FROM messages AS m WHERE {' AND '.join(conditions)}) s "
            f"WHERE {' AND '.join(outer)} AND s.n > 0 ORDER BY {order} LIMIT {int(limit)}"
        )
        summaries = []
        for row in await self.server.pool.fetch(sql, *params):
            found = dict(row)
            counts = {key: found.pop(key) for key in ("n", "first_at", "last_at")}
            summaries.append(
                ConversationSummary(
                    Conversation(**found), counts["n"], counts["first_at"], counts["last_at"]
                )
            )
        return summaries

    async def usage_totals(self, conversation_id: int) -> Usage:
        """The sum of the usage recorded on a conversation's messages."""
        names = [f.name for f in fields(Usage)]
        # Field names come from our own dataclass, never from input, so formatting them is safe.
        sums = ", ".join(
            f"COALESCE(SUM((usage::jsonb ->> '{name}')::bigint), 0) AS {name}" for name in names
        )
        row = await self.server.pool.fetchrow(
            f"SELECT {sums} FROM messages WHERE conversation_id = $1 AND bot = $2 "
            "AND usage IS NOT NULL",
            conversation_id,
            self.bot,
        )
        return Usage(**{name: int(row[name]) for name in names})


# The last message of each person-facing conversation of a bot, and its latest user message
# (atlas/recovery.py's query on SQLite).
_LAST_MESSAGES = """
SELECT c.id, c.channel, c.chat, c.thread, c."user" AS user,
       m.id AS last_id, m.role, m.tool_calls, m.created_at, m.content, m.answers_upto,
       (SELECT MAX(u.id) FROM messages u
         WHERE u.conversation_id = c.id AND u.role = 'user') AS last_user_id,
       (SELECT u.content FROM messages u
         WHERE u.conversation_id = c.id AND u.role = 'user'
         ORDER BY u.id DESC LIMIT 1) AS last_user
FROM conversations c
JOIN messages m ON m.id = (SELECT MAX(id) FROM messages WHERE conversation_id = c.id)
WHERE c.kind = 'conversation' AND c.bot = $1 AND c.updated_at >= $2
"""


def _add(params: list[Any], value: Any) -> int:
    """Append a value; its $ number."""
    params.append(value)
    return len(params)


def _message_columns(chars_parameter: int) -> str:
    """A message as search shows it, its text cut to the length in $`chars_parameter`."""
    return (
        "m.id, m.conversation_id, m.role, m.kind, "
        f"substr(m.content, 1, ${chars_parameter}) AS content, length(m.content) AS length, "
        "m.created_at, m.tool_calls"
    )


def _stored_message(row: asyncpg.Record, query: TextQuery | None = None) -> StoredMessage:
    calls = json.loads(row["tool_calls"] or "[]")
    snippet = row["snippet"]
    if snippet is None and query is not None:
        snippet = plain_snippet(row["content"] or "", query.terms)
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
