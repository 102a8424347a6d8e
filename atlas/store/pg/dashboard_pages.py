"""The dashboard pages' own reads of a bot's conversations on PostgreSQL
(atlas/dashboard/conversation_reads.py `ConversationReads`): the same rows as
atlas/dashboard/queries.py's and chat_history.py's SQL gives from conversations.db, shaped by
the same functions. Every query keeps to the store's bot: one database holds every bot, and a
conversation's or a message's id is the database's, not the bot's own.
"""

from __future__ import annotations

from itertools import takewhile
from typing import Any

from atlas.dashboard.chat_history import (
    ROWS_READ,
    TEXT_CHARS,
    TURNS_SHOWN,
    ChatItem,
    StoredRow,
    fold,
)
from atlas.dashboard.queries import (
    TEXT_SHOWN,
    DayStats,
    MessageView,
    ToolCallView,
    UsageRow,
    Window,
    _add_row,
)
from atlas.store.pg.conversations import PgConversationStore


def _tokens(key: str) -> str:
    return f"SUM((usage::jsonb ->> '{key}')::bigint)"


_PAGE_SQL = (
    "SELECT id, role, kind, substr(content, 1, $3) AS content, length(content) AS length, "
    "tool_calls, tool_call_id, created_at, model FROM messages "
    "WHERE bot = $1 AND conversation_id = $2 AND id > $4 ORDER BY id LIMIT $5"
)


class PgConversationReads:
    """One bot's rows for the pages, from its PostgreSQL store's pool."""

    def __init__(self, store: PgConversationStore) -> None:
        self.store = store
        self.bot = store.bot

    @property
    def _pool(self) -> Any:
        return self.store.server.pool

    async def stats_since(self, since: str) -> DayStats:
        row = await self._pool.fetchrow(
            "SELECT COUNT(*) FILTER (WHERE role = 'assistant' AND tool_calls IS NULL), "
            f"COUNT(*), {_tokens('input_tokens')}, {_tokens('output_tokens')} "
            "FROM messages WHERE bot = $1 AND created_at >= $2",
            self.bot,
            since,
        )
        return DayStats(*(int(value or 0) for value in row))

    async def usage_by_hour(self, since: str) -> list[UsageRow]:
        rows = await self._pool.fetch(
            "SELECT substr(created_at, 1, 13), COALESCE(model, ''), "
            f"{_tokens('input_tokens')}, {_tokens('output_tokens')}, "
            f"{_tokens('cache_read_tokens')} FROM messages "
            "WHERE bot = $1 AND created_at >= $2 AND usage IS NOT NULL GROUP BY 1, 2",
            self.bot,
            since,
        )
        return [UsageRow(h, m, int(i or 0), int(o or 0), int(c or 0)) for h, m, i, o, c in rows]

    async def list_conversations(
        self, *, limit: int, offset: int
    ) -> tuple[list[dict[str, Any]], int]:
        async with self._pool.acquire() as conn:
            total = await conn.fetchval(
                "SELECT COUNT(*) FROM conversations WHERE bot = $1", self.bot
            )
            rows = await conn.fetch(
                "SELECT c.*, (SELECT COUNT(*) FROM messages AS m WHERE m.conversation_id = c.id) "
                "AS messages FROM conversations AS c WHERE c.bot = $1 "
                "ORDER BY c.updated_at DESC, c.id DESC LIMIT $2 OFFSET $3",
                self.bot,
                limit,
                offset,
            )
        return [dict(row) for row in rows], int(total)

    async def conversation_window(
        self, conversation_id: int, *, after_id: int | None, before_id: int | None, limit: int
    ) -> Window:
        """As queries.py's `conversation_window`: a page by id cursors, never starting on a
        tool result."""
        async with self._pool.acquire() as conn:
            if after_id is None:
                after_id, limit = await self._start_before(conn, conversation_id, before_id, limit)
            messages, later = await self._page(conn, conversation_id, after_id, limit)
            first = messages[0].id if messages else after_id + 1
            sooner = await conn.fetchval(
                "SELECT 1 FROM messages WHERE bot = $1 AND conversation_id = $2 AND id < $3 "
                "LIMIT 1",
                self.bot,
                conversation_id,
                first,
            )
        return Window(messages, first if sooner else None, later)

    async def _page(
        self, conn: Any, conversation_id: int, after_id: int, limit: int
    ) -> tuple[list[MessageView], int | None]:
        async def read(after: int, count: int) -> list[dict[str, Any]]:
            found = await conn.fetch(_PAGE_SQL, self.bot, conversation_id, TEXT_SHOWN, after, count)
            return [dict(row) for row in found]

        rows = await read(after_id, limit)
        shown: list[MessageView] = []
        calls: dict[str, ToolCallView] = {}
        asked = limit
        while rows:
            for row in rows:
                _add_row(row, shown, calls)
            waiting = sum(1 for call in calls.values() if call.result_id is None)
            if not waiting or len(rows) < asked:
                break
            # The page ended inside a round of tool calls: read on through its results.
            asked = waiting
            following = await read(rows[-1]["id"], waiting)
            rows = list(
                takewhile(lambda r: r["role"] == "tool" and r["tool_call_id"] in calls, following)
            )
        last = max((m.id for m in shown), default=after_id)
        last = max([last, *(c.result_id for c in calls.values() if c.result_id is not None)])
        more = await conn.fetchval(
            "SELECT 1 FROM messages WHERE bot = $1 AND conversation_id = $2 AND id > $3 LIMIT 1",
            self.bot,
            conversation_id,
            last,
        )
        return shown, (last if more else None)

    async def _start_before(
        self, conn: Any, conversation_id: int, before_id: int | None, limit: int
    ) -> tuple[int, int]:
        bound = before_id if before_id is not None else 2**63 - 1
        ids = await conn.fetch(
            "SELECT id, role FROM messages WHERE bot = $1 AND conversation_id = $2 AND id < $3 "
            "ORDER BY id DESC LIMIT $4",
            self.bot,
            conversation_id,
            bound,
            limit,
        )
        if not ids:
            return (bound - 1 if before_id is not None else 0), limit
        start, role = ids[-1]["id"], ids[-1]["role"]
        if role != "tool":
            return start - 1, len(ids)
        # Back to the call it answers, so the two are shown together.
        call = await conn.fetchval(
            "SELECT id FROM messages WHERE bot = $1 AND conversation_id = $2 AND id < $3 "
            "AND role != 'tool' ORDER BY id DESC LIMIT 1",
            self.bot,
            conversation_id,
            start,
        )
        start = call if call is not None else start
        length = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE bot = $1 AND conversation_id = $2 "
            "AND id >= $3 AND id < $4",
            self.bot,
            conversation_id,
            start,
            bound,
        )
        return start - 1, int(length)

    async def whole_message(self, conversation_id: int, message_id: int) -> str | None:
        found: str | None = await self._pool.fetchval(
            "SELECT content FROM messages WHERE bot = $1 AND id = $2 AND conversation_id = $3",
            self.bot,
            message_id,
            conversation_id,
        )
        return found

    async def chat_history(self, channel: str, chat: str) -> tuple[int | None, list[ChatItem]]:
        async with self._pool.acquire() as conn:
            conversation = await conn.fetchval(
                "SELECT id FROM conversations WHERE bot = $1 AND channel = $2 AND chat = $3 "
                "AND thread = '' AND \"user\" = ''",
                self.bot,
                channel,
                chat,
            )
            if conversation is None:
                return None, []
            start = await conn.fetchval(
                "SELECT id FROM messages WHERE bot = $1 AND conversation_id = $2 "
                "AND role = 'user' ORDER BY id DESC LIMIT 1 OFFSET $3",
                self.bot,
                conversation,
                TURNS_SHOWN - 1,
            )
            found = await conn.fetch(
                "SELECT id, role, kind, substr(content, 1, $4) AS content, "
                "length(content) AS length, tool_calls, tool_call_id FROM messages "
                "WHERE bot = $1 AND conversation_id = $2 AND id >= $3 ORDER BY id DESC LIMIT $5",
                self.bot,
                conversation,
                start or 0,
                TEXT_CHARS,
                ROWS_READ,
            )
        rows = [StoredRow.read(row) for row in found]
        rows.reverse()
        return int(conversation), fold(rows)


__all__ = ["PgConversationReads"]
