"""The seam between the dashboard's pages and a bot's conversations, for the reads that are the
pages' own (not the conversation engine's, atlas/store/engine.py): today's figures on Home, the
Usage page's hours, the Conversations list and a conversation's pages, a message whole, and the
Chat page's earlier turns.

`SqliteConversationReads` runs atlas/dashboard/queries.py's and chat_history.py's functions on
the bot's conversations.db, unchanged; `PgConversationReads` (atlas/store/pg/dashboard_pages.py)
gives the same rows from the home's PostgreSQL database. `conversation_reads(store)` picks the
one for a store, so the pages read either engine the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from atlas.dashboard.chat_history import ChatItem, read_history
from atlas.dashboard.queries import (
    DayStats,
    UsageRow,
    Window,
    conversation_window,
    list_conversations,
    stats_since,
    usage_by_hour,
    whole_message,
)

if TYPE_CHECKING:
    from atlas.store.conversations import ConversationStore


class ConversationReads(Protocol):
    async def stats_since(self, since: str) -> DayStats: ...

    async def usage_by_hour(self, since: str) -> list[UsageRow]: ...

    async def list_conversations(
        self, *, limit: int, offset: int
    ) -> tuple[list[dict[str, Any]], int]: ...

    async def conversation_window(
        self, conversation_id: int, *, after_id: int | None, before_id: int | None, limit: int
    ) -> Window: ...

    async def whole_message(self, conversation_id: int, message_id: int) -> str | None: ...

    async def chat_history(self, channel: str, chat: str) -> tuple[int | None, list[ChatItem]]:
        """The conversation of this chat (no thread, no user) and its latest turns as the
        Chat page shows them; (None, []) before it has one."""
        ...


class SqliteConversationReads:
    """The pages' reads on a bot's conversations.db (its store's thread), as before."""

    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    async def stats_since(self, since: str) -> DayStats:
        return await self.store.db.call(lambda db: stats_since(db, since))

    async def usage_by_hour(self, since: str) -> list[UsageRow]:
        return await self.store.db.call(lambda db: usage_by_hour(db, since))

    async def list_conversations(
        self, *, limit: int, offset: int
    ) -> tuple[list[dict[str, Any]], int]:
        return await self.store.db.call(
            lambda db: list_conversations(db, limit=limit, offset=offset)
        )

    async def conversation_window(
        self, conversation_id: int, *, after_id: int | None, before_id: int | None, limit: int
    ) -> Window:
        return await self.store.db.call(
            lambda db: conversation_window(
                db, conversation_id, after_id=after_id, before_id=before_id, limit=limit
            )
        )

    async def whole_message(self, conversation_id: int, message_id: int) -> str | None:
        return await self.store.db.call(lambda db: whole_message(db, conversation_id, message_id))

    async def chat_history(self, channel: str, chat: str) -> tuple[int | None, list[ChatItem]]:
        found = await self.store.db.call(
            lambda db: db.execute(
                "SELECT id FROM conversations WHERE channel = ? AND chat = ? AND thread = '' "
                "AND user = ''",
                [channel, chat],
            ).fetchone()
        )
        if found is None:
            return None, []
        conversation: int = found[0]
        return conversation, await self.store.db.call(lambda db: read_history(db, conversation))


def conversation_reads(store: Any) -> ConversationReads:
    """The pages' reads for a bot's store: its file's, or the PostgreSQL database's."""
    from atlas.store.conversations import ConversationStore

    if isinstance(store, ConversationStore):
        return SqliteConversationReads(store)
    from atlas.store.pg.dashboard_pages import PgConversationReads

    return PgConversationReads(store)


__all__ = ["ConversationReads", "SqliteConversationReads", "conversation_reads"]
