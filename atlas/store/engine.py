"""The seam between a bot's conversations and the engine that keeps them.

`ConversationEngine` is what the rest of Atlas may ask of a bot's conversation store, whichever
engine holds it: the embedded default, a SQLite file per bot (atlas/store/conversations.py,
unchanged), or the home's PostgreSQL database (atlas/store/pg/conversations.py, chosen by
`[store] url`). Code written against this protocol runs on both; the parametrized tests in
tests/unit/test_store_engines.py run the same calls and queries on each.

The SQLite store's `also` hook (outbox rows written in the answer's transaction) is not in the
protocol: each engine takes its own (`Outgoing` on SQLite, atlas/store/pg/outbox.py
`written_with` on PostgreSQL). Of the home's shared tables (atlas/store/home_db.py),
`HomeStateEngine` covers the gate's log and the delegations; the outbox's rows, the routines,
pairing, the executors' records and the dashboard's reads have seams of their own
(atlas/outbox/engine.py, atlas/routines/engine.py, atlas/channels/pairing_store.py,
atlas/executors/record_rows.py, atlas/dashboard/reads.py).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from atlas.providers.base import Message, Usage
from atlas.store.conversation_schema import Conversation, ConversationKind, MessageKind
from atlas.store.history_cache import Compaction
from atlas.store.home_db import GateRecord
from atlas.store.search import (
    ConversationMatch,
    ConversationSummary,
    MessageFilter,
    SearchHit,
    SearchSort,
    StoredMessage,
    TextQuery,
)


@runtime_checkable
class ConversationEngine(Protocol):
    """A bot's conversations: get or make one, append and read messages, search them."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

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
    ) -> Conversation: ...

    async def get_conversation(self, conversation_id: int) -> Conversation | None: ...

    async def thread_known(self, channel: str, chat: str, thread: str) -> bool: ...

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
    ) -> int | None: ...

    async def newest_user_message_id(self, conversation_id: int) -> int | None: ...

    async def record_compaction(
        self, conversation_id: int, first_kept_id: int, summary: str
    ) -> None: ...

    async def last_compaction(self, conversation_id: int) -> Compaction | None: ...

    async def history(self, conversation_id: int) -> list[Message]: ...

    async def history_and_compaction(
        self, conversation_id: int
    ) -> tuple[list[Message], Compaction | None]: ...

    async def search(
        self, query: str, *, limit: int = 20, conversation_id: int | None = None
    ) -> list[SearchHit]: ...

    async def match_conversations(
        self, query: TextQuery, where: MessageFilter, *, sort: SearchSort, limit: int
    ) -> list[ConversationMatch]: ...

    async def matching_messages(
        self, query: TextQuery, where: MessageFilter, *, limit: int, chars: int = 2000
    ) -> list[StoredMessage]: ...

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
    ) -> list[StoredMessage]: ...

    async def get_message(self, message_id: int, *, chars: int = 2000) -> StoredMessage | None: ...

    async def summarise_conversations(
        self, where: MessageFilter, *, sort: SearchSort, limit: int, ids: list[int] | None = None
    ) -> list[ConversationSummary]: ...

    async def usage_totals(self, conversation_id: int) -> Usage: ...


@runtime_checkable
class HomeStateEngine(Protocol):
    """The home's shared state behind the seam so far: the gate's log and the delegations."""

    async def close(self) -> None: ...

    async def record_decision(self, record: GateRecord) -> None: ...

    async def recent_decisions(self, limit: int = 20) -> list[dict[str, Any]]: ...

    async def record_delegation(self, row: dict[str, Any]) -> None: ...

    async def update_delegation(self, delegation_id: str, **fields: Any) -> None: ...

    async def delegation(self, delegation_id: str) -> dict[str, Any] | None: ...

    async def delegations(
        self, bot: str, parent_conversation_id: int, limit: int = 20
    ) -> list[dict[str, Any]]: ...
