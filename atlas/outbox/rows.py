"""The outbox's rows: one per message going out, in the `outbox` table of the bot's
conversations.db (made by migration 009_outbox, atlas/store/conversation_schema.py).

Every function here takes the open `sqlite_utils.Database` and is one transaction (or a step of
the caller's), so a row's state and what it stands for change together: an answer and its row
are written by one INSERT pair (`ConversationStore.append(..., also=...)`), a row caught by a
crash becomes `maybe` in the same transaction that queues the note about it. A change of one
row alone is one statement, which commits itself (the connection is in autocommit mode:
atlas/store/db.py): no BEGIN and COMMIT around it.

States: pending → sending → delivered | maybe | failed | kept (kept → sending again later).
The settled ones (delivered, maybe, failed) and only they set `settled_at`: what a start resumes
is found by `settled_at IS NULL` (`open_rows`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from atlas.channels.base import Address
from atlas.store.db import fetch_dicts, utc_now_iso

if TYPE_CHECKING:  # see atlas/routines/store.py: sqlite-utils is imported late
    import sqlite_utils

State = Literal["pending", "sending", "delivered", "maybe", "failed", "kept"]
# answer: a turn's final answer (stored as a message); note: a line about a turn (a failure,
# "Stopped.", a command's reply; not stored); notice: told about something (a turn cut short, a
# message that may not have arrived, a routine interrupted); report: a routine's result;
# question: asked with buttons, posted by the channel itself (the outbox records it).
Kind = Literal["answer", "note", "notice", "report", "question"]
OPEN_STATES: tuple[State, ...] = ("pending", "sending", "kept")
# A row of these kinds that may or may not have arrived is followed by a note saying so.
TOLD_WHEN_UNSURE: tuple[Kind, ...] = ("answer", "report")


@dataclass(frozen=True)
class OutboxRow:
    id: int
    address: Address
    kind: Kind
    text: str
    files: tuple[Path, ...]
    message_id: int | None  # the stored message it delivers (answers and stored notices)
    state: State
    attempts: int
    error: str
    platform_id: str | None
    created_at: str
    key: str | None = None  # what it is for, when one thing must make one row


def row_from(record: dict[str, Any], bot: str) -> OutboxRow:
    address = Address(bot, record["channel"], record["chat"], record["thread"], record["user"])
    files = tuple(Path(p) for p in json.loads(record["files"])) if record["files"] else ()
    return OutboxRow(
        id=record["id"],
        address=address,
        kind=record["kind"],
        text=record["text"],
        files=files,
        message_id=record["message_id"],
        state=record["state"],
        attempts=record["attempts"],
        error=record["error"] or "",
        platform_id=record["platform_id"],
        created_at=record["created_at"],
        key=record["key"],
    )


def files_json(files: tuple[Path, ...] | list[Path]) -> str | None:
    """A row's files as stored (the same text on both engines), None for none."""
    return json.dumps([str(p) for p in files]) if files else None


_INSERT_ROW = (
    "INSERT INTO outbox (channel, chat, thread, user, kind, text, files, message_id, key, "
    "state, attempts, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?) "
    "ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING"
)


def _row_values(
    address: Address,
    kind: Kind,
    text: str,
    files: tuple[Path, ...] | list[Path],
    message_id: int | None,
    key: str | None,
    state: State,
    now: str | None,
) -> list[Any]:
    return [
        address.channel,
        address.chat,
        address.thread,
        address.user,
        kind,
        text,
        files_json(files),
        message_id,
        key,
        state,
        now or utc_now_iso(),
    ]


def insert_row(
    db: sqlite_utils.Database,
    address: Address,
    kind: Kind,
    text: str,
    files: tuple[Path, ...] | list[Path] = (),
    *,
    message_id: int | None = None,
    key: str | None = None,
    state: State = "pending",
    now: str | None = None,
) -> int:
    """A new row's id (or, when `key` is stored already, that row's: enqueueing the same
    thing twice, say after a crash between enqueueing and recording it, makes one row)."""
    values = _row_values(address, kind, text, files, message_id, key, state, now)
    cursor = db.conn.execute(_INSERT_ROW, values)
    if cursor.rowcount:
        return int(cursor.lastrowid)  # type: ignore[arg-type]
    return int(db.conn.execute("SELECT id FROM outbox WHERE key = ?", [key]).fetchone()[0])


def add_row(
    db: sqlite_utils.Database,
    address: Address,
    kind: Kind,
    text: str,
    files: tuple[Path, ...] | list[Path] = (),
    *,
    message_id: int | None = None,
    key: str | None = None,
) -> OutboxRow:
    """`insert_row`, returning the row as stored: the new one from its INSERT (RETURNING), or
    the one `key` found (perhaps settled since), read then."""
    values = _row_values(address, kind, text, files, message_id, key, "pending", None)
    made = fetch_dicts(db, f"{_INSERT_ROW} RETURNING *", values)
    found = made or fetch_dicts(db, "SELECT * FROM outbox WHERE key = ?", [key])
    return row_from(found[0], address.bot)


@dataclass
class Outgoing:
    """The rows that deliver a stored message, written in the transaction that stores it
    (`ConversationStore.append(..., also=outgoing)`): any `notes` first (lines about the
    turn, told before its answer), then the message itself. `rows` holds them once written."""

    address: Address
    text: str
    files: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()
    kind: Kind = "answer"
    rows: list[OutboxRow] = field(default_factory=list)

    def __call__(self, db: sqlite_utils.Database, message_id: int) -> None:
        written = [(note, (), "note", None) for note in self.notes]
        written.append((self.text, self.files, self.kind, message_id))
        now = utc_now_iso()
        for text, files, kind, stored_id in written:
            row_id = insert_row(db, self.address, kind, text, files, message_id=stored_id, now=now)
            self.rows.append(
                OutboxRow(
                    row_id, self.address, kind, text, files, stored_id, "pending", 0, "", None, now
                )
            )


def get_row(db: sqlite_utils.Database, row_id: int, bot: str) -> OutboxRow | None:
    found = fetch_dicts(db, "SELECT * FROM outbox WHERE id = ?", [row_id])
    return row_from(found[0], bot) if found else None


def open_rows(db: sqlite_utils.Database, bot: str, *, before: str) -> list[OutboxRow]:
    """Rows created before `before` (a UTC ISO time) that are not settled, oldest first.
    Every settled state sets `settled_at`, and the open rows are found by it (the index
    `outbox_unsettled`, migration 011), never by reading the whole outbox."""
    found = fetch_dicts(
        db,
        "SELECT * FROM outbox WHERE settled_at IS NULL AND state IN ('pending', 'sending', "
        "'kept') AND created_at < ? ORDER BY id",
        [before],
    )
    return [row_from(record, bot) for record in found]


def mark_sending(db: sqlite_utils.Database, row_id: int) -> None:
    """From here on a crash leaves the row `sending`: it may have arrived, never sent again."""
    db.conn.execute(
        "UPDATE outbox SET state = 'sending', attempts = attempts + 1, sending_at = ? WHERE id = ?",
        [utc_now_iso(), row_id],
    )


def mark_delivered(db: sqlite_utils.Database, row_id: int, platform_id: str | None) -> None:
    db.conn.execute(
        "UPDATE outbox SET state = 'delivered', platform_id = ?, error = NULL, settled_at = ? "
        "WHERE id = ?",
        [platform_id, utc_now_iso(), row_id],
    )


def mark_kept(
    db: sqlite_utils.Database,
    row_ids: list[int],
    error: str,
    *,
    unsent: str | None = None,
    unsent_files: tuple[Path, ...] = (),
) -> None:
    """Not taken (an outage): kept for a later try. `unsent` and `unsent_files` (for the
    first row): what is left of it when its start went out, so a retry never repeats that."""
    if unsent is not None and row_ids:
        db.execute(
            "UPDATE outbox SET text = ?, files = ? WHERE id = ?",
            [unsent, files_json(unsent_files), row_ids[0]],
        )
    db.conn.executemany(
        "UPDATE outbox SET state = 'kept', error = ? WHERE id = ?",
        [(error, row_id) for row_id in row_ids],
    )


def mark_failed(db: sqlite_utils.Database, row_id: int, error: str) -> None:
    db.execute(
        "UPDATE outbox SET state = 'failed', error = ?, settled_at = ? WHERE id = ?",
        [error, utc_now_iso(), row_id],
    )


def mark_unsure(db: sqlite_utils.Database, row_id: int, error: str) -> None:
    """`maybe` without a note: for what the turn that sent it answers for (a question)."""
    db.execute(
        "UPDATE outbox SET state = 'maybe', error = ?, settled_at = ? WHERE id = ?",
        [error, utc_now_iso(), row_id],
    )


def mark_maybe(
    db: sqlite_utils.Database, row: OutboxRow, error: str, note: str | None
) -> OutboxRow | None:
    """The row may or may not have arrived: never sent again. With `note`, in the same
    transaction, the note telling the person so is queued once (its key is the row's): stored
    as the conversation's answer too when the row delivers a stored message, so the model
    knows. Returns the note's row as stored."""
    db.execute(
        "UPDATE outbox SET state = 'maybe', error = ?, settled_at = ? WHERE id = ?",
        [error, utc_now_iso(), row.id],
    )
    if note is None:
        return None
    message_id = _store_note(db, row.message_id, note) if row.message_id is not None else None
    return add_row(db, row.address, "notice", note, message_id=message_id, key=f"maybe:{row.id}")


def _store_note(db: sqlite_utils.Database, answer_id: int, note: str) -> int | None:
    """The note as an assistant message after the answer it speaks for, with the same
    `answers_upto` (recovery reads a conversation's last final answer by it)."""
    now = utc_now_iso()
    stored = db.conn.execute(
        "INSERT INTO messages (conversation_id, role, content, kind, answers_upto, created_at) "
        "SELECT conversation_id, 'assistant', ?, 'message', answers_upto, ? FROM messages "
        "WHERE id = ? RETURNING id",
        [note, now, answer_id],
    ).fetchall()  # all fetched: the statement has finished
    if not stored:  # the answer is gone
        return None
    return int(stored[0][0])  # its conversation's updated_at moved with it (migration 012)


__all__ = [
    "OPEN_STATES",
    "TOLD_WHEN_UNSURE",
    "Kind",
    "OutboxRow",
    "State",
    "get_row",
    "Outgoing",
    "add_row",
    "insert_row",
    "mark_delivered",
    "mark_failed",
    "mark_kept",
    "mark_maybe",
    "mark_unsure",
    "mark_sending",
    "open_rows",
    "row_from",
]
