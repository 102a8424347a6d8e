"""The full-text indexes of messages, filled in batches on the writer thread, behind the writes.

Indexing a message in its own transaction cost the event loop more than storing it (FTS5
writes a new segment per transaction, into both indexes: words and trigrams); in batches it
costs a fraction of that (docs/benchmarks.md, "Conversation search"). So a message is stored at
once and indexed later: `index_pending_messages` indexes every message newer than the
watermark in `message_index`, in one transaction with the watermark's move. It runs every
`db.UPKEEP_EVERY` store calls, when a store opens and closes, and before every search, so a
search always sees every stored message.

Rows at or below the watermark are in both indexes, and triggers keep them in step with
edits and deletes; rows above it are in neither (an external-content FTS5 index must be told
exactly what it holds, so those triggers skip them). No trigger runs on an insert (migration
010): a trigger naming the indexes, even one whose condition is false, makes every INSERT into
`messages` open both FTS5 tables. A new row's id is above the watermark because deleting the
newest indexed rows lowers the watermark to the newest row left.
"""

from __future__ import annotations

import sqlite_utils

INDEXES = ("messages_fts", "messages_trigram")
_WATERMARK = "(SELECT indexed_upto FROM message_index)"
# Past the newest row left (its newest rows deleted), the watermark comes down to that row.
_LOWER_WATERMARK = (
    "UPDATE message_index SET indexed_upto = (SELECT COALESCE(MAX(id), 0) FROM messages) "
    "WHERE indexed_upto > (SELECT COALESCE(MAX(id), 0) FROM messages);"
)


def _insert(table: str, row: str) -> str:
    return f"INSERT INTO {table} (rowid, content) VALUES ({row}.id, {row}.content);"


def _delete(table: str) -> str:
    return f"INSERT INTO {table} ({table}, rowid, content) VALUES ('delete', old.id, old.content);"


def defer_message_indexing(db: sqlite_utils.Database) -> None:
    """Migration: replace the index-on-insert triggers by the watermark and its triggers."""
    db.execute(
        "CREATE TABLE message_index "
        "(id INTEGER PRIMARY KEY CHECK (id = 1), indexed_upto INTEGER NOT NULL)"
    )
    # Every message stored so far was indexed by the old triggers.
    db.execute("INSERT INTO message_index VALUES (1, COALESCE((SELECT MAX(id) FROM messages), 0))")
    for name in ("ai", "ad", "au"):
        db.execute(f"DROP TRIGGER messages_{name}")  # made by sqlite-utils' enable_fts
        db.execute(f"DROP TRIGGER messages_trigram_{name}")
    deletes = "".join(_delete(table) for table in INDEXES)
    inserts = "".join(_insert(table, "new") for table in INDEXES)
    for trigger in (
        # An id at or below the watermark comes back only when the newest message was
        # deleted: that row is indexed at once, as nothing later would.
        f"message_index_ai AFTER INSERT ON messages WHEN new.id <= {_WATERMARK} "
        f"BEGIN {inserts} END",
        f"message_index_ad AFTER DELETE ON messages WHEN old.id <= {_WATERMARK} "
        f"BEGIN {deletes} END",
        # Only edits of the text: delivery times change on every answer.
        f"message_index_au AFTER UPDATE OF content ON messages WHEN old.id <= {_WATERMARK} "
        f"BEGIN {deletes} {inserts} END",
    ):
        db.execute(f"CREATE TRIGGER {trigger}")


def index_only_in_batches(db: sqlite_utils.Database) -> None:
    """Migration: no trigger on insert. The one 008 made indexed a row whose id was at or below
    the watermark (the newest message deleted, its id given again); instead the delete lowers
    the watermark, so every new id is above it and indexed in the next batch."""
    db.execute("DROP TRIGGER message_index_ai")
    db.execute("DROP TRIGGER message_index_ad")
    db.execute(
        f"CREATE TRIGGER message_index_ad AFTER DELETE ON messages WHEN old.id <= {_WATERMARK} "
        f"BEGIN {''.join(_delete(table) for table in INDEXES)} {_LOWER_WATERMARK} END"
    )
    # Rows the old trigger indexed at or below the watermark stay indexed: the watermark only
    # comes down to the newest row, never below a row that is not indexed.
    db.execute(_LOWER_WATERMARK)


def unindexed_messages(db: sqlite_utils.Database) -> bool:
    """Whether messages wait to be indexed (a read: a reader connection can ask)."""
    row = db.conn.execute(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM messages) > indexed_upto FROM message_index"
    ).fetchone()
    return bool(row and row[0])


def index_pending_messages(db: sqlite_utils.Database) -> int:
    """Index every message above the watermark and move it; return how many were indexed."""
    indexed = 0
    conn = db.conn
    # IMMEDIATE: the write lock first, so no other process's write can slip in between
    # reading the watermark and moving it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        upto, newest = conn.execute(
            "SELECT indexed_upto, (SELECT COALESCE(MAX(id), 0) FROM messages) FROM message_index"
        ).fetchone()
        if newest > upto:
            for table in INDEXES:
                indexed = conn.execute(
                    f"INSERT INTO {table} (rowid, content) "
                    "SELECT id, content FROM messages WHERE id > ? AND id <= ?",
                    [upto, newest],
                ).rowcount
            conn.execute("UPDATE message_index SET indexed_upto = ?", [newest])
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # some errors end the transaction themselves
            conn.execute("ROLLBACK")
        raise
    return indexed
