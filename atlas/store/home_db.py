"""The home's own database, `atlas.db`: what is not one bot's conversation (gate decisions,
pairing, subagents, routines, the delegation record of the outside executors)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from atlas.store.conversation_schema import FTS_TOKENIZE
from atlas.store.db import Database, Migration, fetch_dicts, insert_dict, utc_now_iso

T = TypeVar("T")


def _gate_decisions(db: sqlite_utils.Database) -> None:
    db["gate_decisions"].create(
        {
            "id": int,
            "at": str,
            "bot": str,
            "conversation_id": int,
            "run_kind": str,
            "tool": str,
            "arguments_digest": str,  # sha256 prefix: which call, without storing its content
            "summary": str,  # the command or path judged, cut short
            "verdict": str,  # allow | deny
            "rule": str,
            "reason": str,
            "answered_by": str,  # rule | guardian | user | timeout | nobody
        },
        pk="id",
    )
    db["gate_decisions"].create_index(["at"])


def _channel_pairing(db: sqlite_utils.Database) -> None:
    # A stranger's pairing code, until the owner approves or denies it (or it expires).
    db["pairing_codes"].create(
        {
            "code": str,
            "bot": str,
            "platform": str,  # telegram | slack
            "user_id": str,
            "user_name": str,
            "chat": str,
            "created_at": str,
            "expires_at": str,
            "status": str,  # pending | approved | denied
            "decided_at": str,
        },
        pk="code",
    )
    db["pairing_codes"].create_index(["bot", "platform", "user_id"])
    # People approved through pairing, on top of bot.toml's allowed_users.
    db["paired_users"].create(
        {
            "bot": str,
            "platform": str,
            "user_id": str,
            "user_name": str,
            "code": str,
            "approved_at": str,
        },
        pk=("bot", "platform", "user_id"),
    )
    # `/new` in a chat: its conversation key gets this generation as a suffix.
    db["chat_generations"].create(
        {"channel": str, "chat": str, "thread": str, "user": str, "generation": int},
        pk=("channel", "chat", "thread", "user"),
    )


def _delegations(db: sqlite_utils.Database) -> None:
    # One row per subagent started by `delegate` (atlas/agents/subagents.py).
    db["delegations"].create(
        {
            "id": str,  # sa-<hex>, what the model names in steer and stop
            "batch": str,  # the spawn call it came from: one notice per batch
            "bot": str,
            "parent_conversation_id": int,
            "parent_run_kind": str,
            "goal": str,
            "context": str,
            "status": str,  # queued | running | done | failed | stopped
            "result": str,  # the subagent's answer, whole
            "reason": str,  # why it failed or was stopped
            "spill_path": str,  # where a result longer than the summary budget went
            "conversation_id": int,  # the subagent's own conversation in the bot's store
            "input_tokens": int,
            "output_tokens": int,
            "rounds": int,
            "created_at": str,
            "started_at": str,
            "ended_at": str,
        },
        pk="id",
    )
    db["delegations"].create_index(["bot", "parent_conversation_id"])


def _routines(db: sqlite_utils.Database) -> None:
    # Routines (atlas/routines/store.py): prompts run on a schedule, one name per bot.
    db["routines"].create(
        {
            "id": int,
            "bot": str,
            "name": str,
            "prompt": str,
            "schedule": str,  # as accepted by atlas/routines/schedule.py (`in 30m` kept pinned)
            "channel": str,  # where results go; '' for nowhere (history only)
            "chat": str,
            "thread": str,
            "user": str,
            "paused": int,
            "grace_seconds": int,  # NULL: one period, at most [routines] max_grace
            "source": str,  # tool | file
            "source_digest": str,  # a file routine's content hash: reload changes only edited ones
            "armed_at": str,  # when this schedule started counting (created, changed, resumed)
            "created_at": str,
            "updated_at": str,
        },
        pk="id",
        not_null={"bot", "name", "prompt", "schedule"},
    )
    db["routines"].create_index(["bot", "name"], unique=True)
    # One row per run, and per missed slot that was not caught up.
    db["routine_runs"].create(
        {
            "id": int,
            "routine_id": int,
            "bot": str,
            "name": str,
            "trigger": str,  # schedule | catch-up | manual
            "scheduled_for": str,
            "started_at": str,
            "ended_at": str,
            "status": str,  # running | ok | failed | silent | missed | timeout
            "input_tokens": int,
            "output_tokens": int,
            "delivery": str,  # delivered to … | not delivered: … | silent | no target
            "conversation_id": int,
            "error": str,
            "text": str,  # the final text, cut short
        },
        pk="id",
    )
    db["routine_runs"].create_index(["routine_id", "id"])


def _owed_reports(db: sqlite_utils.Database) -> None:
    # The whole message a run could not deliver (an outage), kept until it is: `text` is
    # only the run's answer, cut short, and a failure's message is not stored at all.
    db["routine_runs"].add_column("owed", str)


def _executor_record(db: sqlite_utils.Database) -> None:
    # The delegation record (atlas/executors/record.py): one row per turn of an executor
    # instance (Atlas's or the person's own) ...
    db["executor_turns"].create(
        {
            "id": int,
            "instance_id": str,  # ex-<hex>, the workbench's id
            "executor": str,  # claude-code
            "account": str,  # the target name: claude-code@work
            "folder": str,
            "conversation": str,  # bot:conversation_id that started it; NULL: the person's own
            "owner": str,  # atlas | person
            "session_id": str,  # the harness's own session, to read its log back
            "prompt": str,
            "final_text": str,
            "files_before": str,  # the folder's git diff stat when the turn started ...
            "files_after": str,  # ... and when it ended
            "usage": str,  # JSON: tokens and cost, as the harness said
            "state": str,  # running | done | failed | stopped | limit
            "started_at": str,
            "ended_at": str,
        },
        pk="id",
    )
    db["executor_turns"].create_index(["instance_id", "id"])
    db["executor_turns"].create_index(["started_at"])
    # ... and what happened in it, in order: prompt, steer, question, answer (`who` answered),
    # final, error, files. Searched (text and who) through an FTS5 index kept in step by triggers.
    db["executor_entries"].create(
        {"id": int, "turn_id": int, "kind": str, "who": str, "text": str, "at": str},
        pk="id",
        foreign_keys=[("turn_id", "executor_turns", "id")],
        not_null={"turn_id", "kind", "text"},
    )
    db["executor_entries"].create_index(["turn_id", "id"])
    db.execute(
        "CREATE VIRTUAL TABLE executor_entries_fts USING fts5(text, who, content='executor_entries', "
        f"content_rowid='id', tokenize='{FTS_TOKENIZE}')"
    )
    # One statement at a time: executescript would commit the migration's transaction.
    delete_old = (
        "INSERT INTO executor_entries_fts (executor_entries_fts, rowid, text, who) "
        "VALUES ('delete', old.id, old.text, old.who);"
    )
    insert_new = (
        "INSERT INTO executor_entries_fts (rowid, text, who) VALUES (new.id, new.text, new.who);"
    )
    for trigger in (
        f"executor_entries_ai AFTER INSERT ON executor_entries BEGIN {insert_new} END",
        f"executor_entries_ad AFTER DELETE ON executor_entries BEGIN {delete_old} END",
        f"executor_entries_au AFTER UPDATE OF text, who ON executor_entries "
        f"BEGIN {delete_old} {insert_new} END",
    ):
        db.execute(f"CREATE TRIGGER {trigger}")


def _executor_tasks(db: sqlite_utils.Database) -> None:
    # Delegations as rows (atlas/executors/task_rows.py): one per executor task of Atlas's, so
    # the workbench, resume and the report of a task cut by a stop survive a restart.
    db["executor_tasks"].create(
        {
            "id": str,  # ex-<hex>, the workbench's id
            "bot": str,
            "conversation_id": int,  # the conversation that started it (its bot's store)
            "run_kind": str,  # conversation | bot | routine: a routine's run waited for it
            "executor": str,  # claude-code
            "account": str,  # the target name: claude-code@work
            "folder": str,
            "goal": str,  # the first prompt, whole: a resume on another executor needs it
            "title": str,
            "route": str,  # JSON list of target names, NULL for the executor's own order
            "session_id": str,  # the harness's session, where a resume goes on
            "state": str,  # running | asking | done | failed | stopped | limit | interrupted
            "detail": str,  # what it waits on, or how it ended
            "last_event": str,
            "result_summary": str,
            "started_at": str,
            "ended_at": str,
            "updated_at": str,
            "reported_at": str,  # an interrupted task's report was handed to its conversation
        },
        pk="id",
    )
    db["executor_tasks"].create_index(["state"])
    db["executor_tasks"].create_index(["started_at"])


def _routine_precheck(db: sqlite_utils.Database) -> None:
    # A routine's pre-check command (atlas/routines/precheck.py): '' for none.
    db["routines"].add_column("precheck", str, not_null_default="")


HOME_MIGRATIONS: list[Migration] = [
    ("001_gate_decisions", _gate_decisions),
    ("002_channel_pairing", _channel_pairing),
    ("003_delegations", _delegations),
    ("004_routines", _routines),
    ("005_owed_routine_reports", _owed_reports),
    ("006_executor_record", _executor_record),
    ("007_executor_tasks", _executor_tasks),
    ("008_routine_precheck", _routine_precheck),
]


@dataclass(frozen=True)
class GateRecord:
    bot: str
    conversation_id: int
    run_kind: str
    tool: str
    arguments_digest: str
    summary: str
    verdict: str
    rule: str
    reason: str
    answered_by: str


class HomeStore:
    """Opened on first use, so a run that never records anything never touches the file."""

    def __init__(self, path: Path) -> None:
        self.db = Database(path, HOME_MIGRATIONS)
        self._opening = asyncio.Lock()

    @property
    def path(self) -> Path:
        return self.db.path

    async def _ready(self) -> Database:
        if self.db.is_open:
            return self.db
        async with self._opening:
            if not self.db.is_open:
                await self.db.open()
        return self.db

    async def close(self) -> None:
        if self.db.is_open:
            await self.db.close()

    async def call(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run `fn(db)` on the writer thread, opening the file first (for small feature modules
        such as channel pairing that keep their own queries)."""
        return await (await self._ready()).call(fn)

    async def quick(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """`call` for a point read or a single transaction (see `Database.quick`)."""
        return await (await self._ready()).quick(fn)

    async def record_decision(self, record: GateRecord) -> None:
        row = {"at": utc_now_iso(), **record.__dict__}
        # A module function with its data, not a closure: from a worker it crosses to the
        # home's process pickled (atlas/workers/home_db.py), by name rather than by its code
        # (~40 -> ~17 µs for both ends of every gate decision, 763 -> 291 bytes).
        await self.quick(functools.partial(insert_dict, table="gate_decisions", row=row))

    async def recent_decisions(self, limit: int = 20) -> list[dict[str, Any]]:
        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return fetch_dicts(db, "SELECT * FROM gate_decisions ORDER BY id DESC LIMIT ?", [limit])

        return await self.call(select)

    async def record_delegation(self, row: dict[str, Any]) -> None:
        """A new subagent's row (see the `delegations` table)."""
        row = {"created_at": utc_now_iso(), **row}
        await self.quick(lambda db: insert_dict(db, "delegations", row))

    async def update_delegation(self, delegation_id: str, **fields: Any) -> None:
        await self.quick(lambda db: db["delegations"].update(delegation_id, fields))

    async def delegation(self, delegation_id: str) -> dict[str, Any] | None:
        def select(db: sqlite_utils.Database) -> dict[str, Any] | None:
            rows = fetch_dicts(db, "SELECT * FROM delegations WHERE id = ?", [delegation_id])
            return rows[0] if rows else None

        return await self.quick(select)

    async def delegations(
        self, bot: str, parent_conversation_id: int, limit: int = 20
    ) -> list[dict[str, Any]]:
        """The subagents one conversation started, newest first."""

        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return fetch_dicts(
                db,
                "SELECT * FROM delegations WHERE bot = ? AND parent_conversation_id = ? "
                "ORDER BY created_at DESC, id LIMIT ?",
                [bot, parent_conversation_id, limit],
            )

        return await self.call(select)
