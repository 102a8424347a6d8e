"""The tables of a bot's `conversations.db`, their migrations, and the conversation row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sqlite_utils

from atlas.store.db import Migration
from atlas.store.message_index import defer_message_indexing, index_only_in_batches

ConversationKind = Literal["conversation", "bot", "routine", "subagent"]
MessageKind = Literal["message", "notice"]

FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
# Substrings of three characters: finds words in scripts written without spaces (Chinese,
# Japanese, Korean) and parts of words. (SQLite before 3.45 has no remove_diacritics here.)
TRIGRAM_TOKENIZE = "trigram"


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


def _track_delivery(db: sqlite_utils.Database) -> None:
    """A final answer records the newest person's message it saw (`answers_upto`) and when it
    reached the platform (`delivered_at`), so a restart knows what is still owed."""
    db["messages"].add_column("answers_upto", int)
    db["messages"].add_column("delivered_at", str)


def _track_sending(db: sqlite_utils.Database) -> None:
    """When a final answer was handed to the platform (`sending_at`): after a crash, one with
    `sending_at` but no `delivered_at` may have arrived, so it is never sent again."""
    db["messages"].add_column("sending_at", str)


def _create_outbox(db: sqlite_utils.Database) -> None:
    """Every message going out is a row before it is sent (atlas/outbox/): its target, text,
    files and state. Answers the old bookkeeping still owed (`answers_upto` set, no
    `delivered_at`, from the last day, as recovery looked back) become rows: `sending` when
    their sending had begun (the next start tells the person instead of sending), else
    `pending`; from here on `sending_at` and `delivered_at` are no longer written."""
    db.execute(
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY, channel TEXT NOT NULL, chat TEXT NOT NULL, "
        "thread TEXT NOT NULL DEFAULT '', user TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL, "
        "text TEXT NOT NULL DEFAULT '', files TEXT, message_id INTEGER, key TEXT, "
        "state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, error TEXT, "
        "platform_id TEXT, created_at TEXT NOT NULL, sending_at TEXT, settled_at TEXT)"
    )
    # Enqueueing the same thing twice (a crash between enqueueing and recording it) is one row.
    db.execute("CREATE UNIQUE INDEX outbox_key ON outbox (key) WHERE key IS NOT NULL")
    # What a start resumes: the few rows not settled, found without reading the rest.
    db.execute(
        "CREATE INDEX outbox_open ON outbox (state) WHERE state IN ('pending', 'sending', 'kept')"
    )
    db.execute(
        "INSERT INTO outbox (channel, chat, thread, user, kind, text, message_id, state, "
        "created_at, sending_at) "
        "SELECT c.channel, c.chat, c.thread, c.user, 'answer', m.content, m.id, "
        "CASE WHEN m.sending_at IS NULL THEN 'pending' ELSE 'sending' END, m.created_at, "
        "m.sending_at FROM messages m JOIN conversations c ON c.id = m.conversation_id "
        "WHERE c.kind = 'conversation' AND m.role = 'assistant' AND m.answers_upto IS NOT NULL "
        "AND m.delivered_at IS NULL "
        "AND m.created_at >= strftime('%Y-%m-%dT%H:%M:%f', 'now', '-1 day') ORDER BY m.id"
    )


def _index_unsettled_outbox_rows(db: sqlite_utils.Database) -> None:
    """What a start resumes, found by `settled_at IS NULL` (pending, sending and kept rows:
    every other state sets it) instead of by state: marking a row `sending`, once per message
    sent, then leaves the index alone (one page less to write in that commit)."""
    db.execute("DROP INDEX outbox_open")
    db.execute("CREATE INDEX outbox_unsettled ON outbox (id) WHERE settled_at IS NULL")


def _touch_conversation_on_insert(db: sqlite_utils.Database) -> None:
    """A stored message moves its conversation's `updated_at` (recovery and the lists by
    latest read it) in its own INSERT statement: a message stored alone then needs no
    transaction around two statements (atlas/store/conversations.py `append`)."""
    db.execute(
        "CREATE TRIGGER messages_touch_conversation AFTER INSERT ON messages BEGIN "
        "UPDATE conversations SET updated_at = new.created_at WHERE id = new.conversation_id; "
        "END"
    )


def _index_events_across_conversations(db: sqlite_utils.Database) -> None:
    """A platform event is stored once per bot, whatever the conversation: Slack retries an
    event after a restart, and after `!new` it would land in a new conversation."""
    db.execute(
        "CREATE INDEX messages_event_anywhere ON messages (event_id) WHERE event_id IS NOT NULL"
    )


MIGRATIONS: list[Migration] = [
    ("001_conversations", _create_conversations),
    ("002_messages", _create_messages),
    ("003_messages_fts", _index_messages),
    ("004_messages_trigram", _index_messages_by_trigram),
    ("005_compactions", _create_compactions),
    ("006_delivery", _track_delivery),
    ("007_sending", _track_sending),
    ("008_deferred_message_index", defer_message_indexing),
    ("009_outbox", _create_outbox),
    ("010_message_index_in_batches_only", index_only_in_batches),
    ("011_outbox_unsettled_index", _index_unsettled_outbox_rows),
    ("012_messages_touch_their_conversation", _touch_conversation_on_insert),
    ("013_messages_event_anywhere", _index_events_across_conversations),
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
