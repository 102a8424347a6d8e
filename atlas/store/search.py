"""Finding and reading messages in a bot's conversations: FTS5 word and trigram queries, filters.

Each query is a function of the sqlite-utils database, run on the store's writer thread by the
thin async methods of ConversationStore (atlas/store/conversations.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlite_utils

from atlas.store.conversation_schema import Conversation

# A query ranks at most this many matching messages: the newest (the oldest, sorted oldest
# first), found in the index's own rowid order, so a word in every twentieth of a million
# messages costs what a rare one does (issue 34: 50,102 hits took 250 ms, ranked all). Those
# past the bound are found by paging: the match says where it stopped (`bounded_at`), and
# `before` (`after`) that time searches on from there.
CANDIDATES = 2000

SearchIndex = Literal["words", "trigram"]
SearchSort = Literal["relevance", "newest", "oldest"]
DEFAULT_ROLES = ("user", "assistant")

_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
)
# Quotes and FTS5 operators around a term are not part of what a person looks for.
_TERM_EDGES = "\"'“”‘’«»()[]{}*^:,.;!?"


# ---- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchHit:
    """One message found by `search`; `snippet` marks matched words with **…**."""

    message_id: int
    conversation_id: int
    role: str
    snippet: str
    created_at: str


@dataclass(frozen=True)
class ConversationMatch:
    """A conversation with messages matching a query; `score` is its best bm25 (lower is better)."""

    conversation: Conversation
    score: float
    hits: int  # among the messages ranked (see CANDIDATES)
    first_at: str
    last_at: str
    # Set when more messages matched than were ranked: the time of the last one ranked (the
    # oldest, or with sort oldest the newest); `before` (`after`) it finds the rest.
    bounded_at: str | None = None


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


# ---- query building ---------------------------------------------------------------------------


def _quoted_and(terms: list[str]) -> str:
    """Each term a quoted FTS5 phrase (inner quotes doubled), ANDed."""
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _searchable(term: str) -> bool:
    # A term without letters or digits yields no tokens, and an empty phrase matches nothing.
    return any(ch.isalnum() for ch in term)


def fts_query(text: str) -> str | None:
    """Turn a person's text into a safe FTS5 query: each term a quoted phrase, ANDed; None if
    nothing searchable is left."""
    terms = [term for term in text.split() if _searchable(term)]
    return _quoted_and(terms) if terms else None


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
        terms = [t for t in (t.strip(_TERM_EDGES) for t in text.split()) if _searchable(t)]
        if not terms:
            return None
        long_terms = [t for t in terms if len(t) >= 3]
        short_terms = tuple(t for t in terms if len(t) < 3)
        return cls("trigram", _quoted_and(long_terms) or None, short_terms, tuple(terms))


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
            conditions.append(f"m.conversation_id NOT IN ({_id_list(self.exclude)})")
        if self.conversation_id is not None:
            conditions.append("m.conversation_id = :conversation_id")
            params["conversation_id"] = self.conversation_id
        return conditions


def _id_list(ids: tuple[int, ...] | list[int]) -> str:
    """Ids inlined in SQL: integers from our own parsing, never text, so this is safe."""
    return ", ".join(str(int(i)) for i in ids)


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


def _conversations(db: sqlite_utils.Database, ids: list[int]) -> dict[int, Conversation]:
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    rows = db.query(f"SELECT * FROM conversations WHERE id IN ({marks})", ids)
    return {row["id"]: Conversation(**row) for row in rows}


# ---- queries (each run on the store's writer thread) ------------------------------------------


def search_messages(
    db: sqlite_utils.Database, match: str, *, limit: int, conversation_id: int | None = None
) -> list[SearchHit]:
    """Messages matching the FTS5 word query `match` (from fts_query), best first."""
    sql = (
        "SELECT m.id AS message_id, m.conversation_id, m.role, "
        "snippet(messages_fts, 0, '**', '**', '…', 16) AS snippet, m.created_at "
        "FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid "
        "WHERE messages_fts MATCH :match"
        + (" AND m.conversation_id = :conversation_id" if conversation_id is not None else "")
        + " ORDER BY bm25(messages_fts), m.id LIMIT :limit"
    )
    params = {"match": match, "conversation_id": conversation_id, "limit": limit}
    return [SearchHit(**row) for row in db.query(sql, params)]


def match_conversations(
    db: sqlite_utils.Database,
    query: TextQuery,
    where: MessageFilter,
    *,
    sort: SearchSort,
    limit: int,
    candidates: int = CANDIDATES,
) -> list[ConversationMatch]:
    """Conversations holding messages that match, best (or newest, or oldest) first, from the
    `candidates` newest matching messages (oldest, with sort oldest)."""
    params: dict[str, Any] = {"candidates": candidates}
    source, conditions, rank, _ = _match_sql(query, params)
    conditions += where.sql(params)
    # The index's rowid order needs no sort: the scan stops after `candidates` rows.
    order_by = f"{source.split()[0]}.rowid" if query.match is not None else "m.id"
    direction = "" if sort == "oldest" else " DESC"
    sql = (
        f"SELECT m.id, m.conversation_id, m.created_at, {rank} AS score FROM {source} "
        f"WHERE {' AND '.join(conditions)} ORDER BY {order_by}{direction} LIMIT :candidates"
    )
    rows = db.conn.execute(sql, params).fetchall()
    ranked = rank_candidates(rows, sort=sort, limit=limit, candidates=candidates)
    found = _conversations(db, [group.conversation_id for group in ranked])
    return [group.match(found[group.conversation_id]) for group in ranked]


@dataclass(frozen=True)
class RankedConversation:
    """A conversation's share of the candidates: its best score, how many, first/last time."""

    conversation_id: int
    score: float
    hits: int
    first_at: str
    last_at: str
    bounded_at: str | None

    def match(self, conversation: Conversation) -> ConversationMatch:
        return ConversationMatch(
            conversation, self.score, self.hits, self.first_at, self.last_at, self.bounded_at
        )


def rank_candidates(
    rows: Sequence[Sequence[Any]], *, sort: SearchSort, limit: int, candidates: int
) -> list[RankedConversation]:
    """The candidate messages (id, conversation id, created_at, score; in the order taken,
    at most `candidates`) grouped by conversation, the best `limit` first. Both engines rank
    this way (atlas/store/pg/conversations.py), so they find the same conversations."""
    bounded_at = rows[-1][2] if len(rows) >= candidates else None
    groups: dict[int, list[Any]] = {}  # conversation -> score, hits, first/last at, first/last id
    for message_id, conversation_id, created_at, score in rows:
        group = groups.get(conversation_id)
        if group is None:
            groups[conversation_id] = [score, 1, created_at, created_at, message_id, message_id]
            continue
        group[0] = min(group[0], score)
        group[1] += 1
        group[2], group[3] = min(group[2], created_at), max(group[3], created_at)
        group[4], group[5] = min(group[4], message_id), max(group[5], message_id)
    key = {
        "relevance": lambda item: (item[1][0], -item[1][1], -item[1][5]),
        "newest": lambda item: -item[1][5],
        "oldest": lambda item: item[1][4],
    }[sort]
    return [
        RankedConversation(conversation_id, float(score), hits, first_at, last_at, bounded_at)
        for conversation_id, (score, hits, first_at, last_at, _, _) in sorted(
            groups.items(), key=key
        )[:limit]
    ]


def matching_messages(
    db: sqlite_utils.Database,
    query: TextQuery,
    where: MessageFilter,
    *,
    limit: int,
    chars: int = 2000,
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
    low, high = db.execute(
        "SELECT MIN(id), MAX(id) FROM messages WHERE conversation_id = ?",
        [where.conversation_id],
    ).fetchone()
    if low is None:
        return []
    rows = db.query(sql, {**params, "low": low, "high": high})
    return [
        _stored_message(row, row["snippet"] or plain_snippet(row["content"], query.terms))
        for row in rows
    ]


def read_messages(
    db: sqlite_utils.Database,
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
    return [_stored_message(row) for row in db.query(sql, params)]


def get_message(
    db: sqlite_utils.Database, message_id: int, *, chars: int = 2000
) -> StoredMessage | None:
    """One message by id, cut to `chars`; None when there is none."""
    sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages AS m WHERE m.id = :id"
    row = next(db.query(sql, {"id": message_id, "chars": chars}), None)
    return _stored_message(row) if row else None


def summarise_conversations(
    db: sqlite_utils.Database,
    where: MessageFilter,
    *,
    sort: SearchSort,
    limit: int,
    ids: list[int] | None = None,
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
        outer.append(f"c.id IN ({_id_list(ids) or 'NULL'})")
    stats = f"FROM messages AS m WHERE {' AND '.join(conditions)}"
    order = "c.created_at, c.id" if sort == "oldest" else "c.updated_at DESC, c.id DESC"
    sql = (
        f"SELECT c.*, (SELECT COUNT(*) {stats}) AS n, (SELECT MIN(m.created_at) {stats}) "
        f"AS first_at, (SELECT MAX(m.created_at) {stats}) AS last_at FROM conversations AS c "
        f"WHERE {' AND '.join([*outer, f'EXISTS (SELECT 1 {stats})'])} "
        f"ORDER BY {order} LIMIT :limit"
    )
    summaries = []
    for row in db.query(sql, params):
        counts = {key: row.pop(key) for key in ("n", "first_at", "last_at")}
        summaries.append(
            ConversationSummary(
                Conversation(**row), counts["n"], counts["first_at"], counts["last_at"]
            )
        )
    return summaries
