"""The seam between the coding executors' records and the engine that keeps them.

Two records of atlas.db live behind `RecordRows`: the executor tasks as rows (`executor_tasks`,
atlas/executors/task_rows.py `TaskRows`) and the delegation record's turns and entries
(`executor_turns`, `executor_entries`, atlas/executors/record.py `DelegationRecord`).
`SqliteRecordRows` is today's SQL over atlas.db, unchanged (module functions with their data:
from a worker process they cross to the home's process pickled, atlas/workers/home_db.py);
`atlas/store/pg/executors.py` keeps the same rows in PostgreSQL.

The record's search (atlas/tools/delegation_search.py) is behind it too: FTS5 over atlas.db's
entries, PostgreSQL's own full-text search over its entries' `words` (docs/scaling.md).
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from atlas.executors.record_search import (
    InstanceSummary,
    RecordFilter,
    latest_instances,
    match_instances,
    matching_entries,
)
from atlas.executors.workbench import INTERRUPTED
from atlas.store.db import fetch_dicts, utc_now_iso, write_transaction

if TYPE_CHECKING:
    import sqlite_utils

    from atlas.store.home_db import HomeStore

TASKS = "executor_tasks"
CUT_BY_STOP = "Atlas stopped while it ran"
LIVE_STATES = ("running", "asking")
_STAT_LINE = re.compile(r"^\s*(.+?)\s+\|\s+(.*)$")


@runtime_checkable
class RecordRows(Protocol):
    """The executors' task rows and the delegation record's turns and entries."""

    # ---- executor_tasks
    async def save_task(self, row: dict[str, Any]) -> None: ...

    async def task(self, task_id: str) -> dict[str, Any] | None: ...

    async def latest_tasks(self, limit: int) -> list[dict[str, Any]]: ...

    async def interrupt_live_tasks(self, now: str) -> list[str]: ...

    async def unreported_tasks(self) -> list[dict[str, Any]]: ...

    async def mark_task_reported(self, task_id: str, now: str) -> None: ...

    # ---- executor_turns and executor_entries
    async def start_turn(self, row: dict[str, Any]) -> int: ...

    async def set_turn_session(self, turn_id: int, session_id: str) -> None: ...

    async def add_entry(self, turn_id: int, kind: str, text: str, who: str | None) -> None: ...

    async def finish_turn(
        self,
        turn_id: int,
        final_text: str,
        files_changed: str,
        usage: dict[str, Any] | None,
        state: str,
        session_id: str | None,
    ) -> None: ...

    async def instance_turns(self, instance_id: str) -> list[dict[str, Any]]: ...

    # ---- reading back (delegation_search)
    async def latest_instances(
        self, where: RecordFilter, *, limit: int, oldest: bool = False
    ) -> list[InstanceSummary]: ...

    async def match_instances(
        self, text: str, where: RecordFilter, *, limit: int
    ) -> list[InstanceSummary]: ...

    async def matching_entries(
        self, text: str, instance_id: str, *, limit: int
    ) -> list[dict[str, Any]]: ...


def changed_files(before: str, after: str) -> list[str]:
    """The files whose `git diff --stat` line (or `(new)` mark) differs between two stats: what
    one turn changed, when the folder was not clean before it."""

    def lines(stat: str) -> dict[str, str]:
        found = {}
        for line in stat.splitlines():
            if match := _STAT_LINE.match(line):
                found[match[1].strip()] = match[2].strip()
            elif line.strip().endswith("(new)"):
                found[line.strip()[: -len("(new)")].strip()] = "new"
        return found

    old, new = lines(before), lines(after)
    return [name for name, value in new.items() if old.get(name) != value] + [
        name
        for name in old
        if name not in new  # changed back, or committed, by the turn
    ]


def turn_end(
    turn: dict[str, Any],
    final_text: str,
    files_changed: str,
    usage: dict[str, Any] | None,
    state: str,
    session_id: str | None,
    told: bool,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """What ending a turn writes, on either engine: the turn's changed columns, and the entries
    to add (kind, text): its final text unless `told` already, the files it changed."""
    changes: dict[str, Any] = {
        "final_text": final_text,
        "files_after": files_changed,
        "usage": json.dumps(usage) if usage else None,
        "state": state,
        "ended_at": utc_now_iso(),
    }
    if session_id and not turn.get("session_id"):
        changes["session_id"] = session_id
    entries = []
    if final_text and not told:
        entries.append(("final" if state == "done" else "error", final_text))
    changed = changed_files(turn.get("files_before") or "", files_changed or "")
    if changed:
        entries.append(("files", "changed: " + ", ".join(changed)))
    return changes, entries


# ---- atlas.db: module functions with their data (functools.partial), pickled by name -------------


def _upsert(db: sqlite_utils.Database, row: dict[str, Any]) -> None:
    db[TASKS].upsert(row, pk="id")


def _select_one(db: sqlite_utils.Database, task_id: str) -> dict[str, Any] | None:
    rows = fetch_dicts(db, f"SELECT * FROM {TASKS} WHERE id = ?", [task_id])
    return rows[0] if rows else None


def _select_latest(db: sqlite_utils.Database, limit: int) -> list[dict[str, Any]]:
    return fetch_dicts(db, f"SELECT * FROM {TASKS} ORDER BY started_at DESC, id LIMIT ?", [limit])


def _interrupt_live(db: sqlite_utils.Database, now: str) -> list[str]:
    """Rows a killed process left running or asking are interrupted; so are their record's
    open turns. Returns their ids."""
    marks = ", ".join("?" for _ in LIVE_STATES)
    with write_transaction(db):
        ids = [
            row[0]
            for row in db.execute(f"SELECT id FROM {TASKS} WHERE state IN ({marks})", LIVE_STATES)
        ]
        db.execute(
            f"UPDATE {TASKS} SET state = ?, detail = ?, ended_at = ?, updated_at = ?, "
            f"reported_at = NULL WHERE state IN ({marks})",
            [INTERRUPTED, f"interrupted: {CUT_BY_STOP}", now, now, *LIVE_STATES],
        )
        if ids and db["executor_turns"].exists():
            marks_ids = ", ".join("?" for _ in ids)
            db.execute(
                "UPDATE executor_turns SET state = ?, ended_at = ? WHERE state = 'running' "
                f"AND instance_id IN ({marks_ids})",
                [INTERRUPTED, now, *ids],
            )
    return ids


def _select_unreported(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    return fetch_dicts(
        db,
        f"SELECT * FROM {TASKS} WHERE state = ? AND reported_at IS NULL ORDER BY started_at",
        [INTERRUPTED],
    )


def _mark_reported(db: sqlite_utils.Database, task_id: str, now: str) -> None:
    db.execute(f"UPDATE {TASKS} SET reported_at = ? WHERE id = ?", [now, task_id])


def _entry(db: sqlite_utils.Database, turn_id: int, kind: str, text: str, who: str | None) -> None:
    row = {"turn_id": turn_id, "kind": kind, "who": who, "text": text, "at": utc_now_iso()}
    db["executor_entries"].insert(row)


def _last_session(db: sqlite_utils.Database, instance_id: str) -> str | None:
    found = db.execute(
        "SELECT session_id FROM executor_turns WHERE instance_id = ? AND session_id IS NOT NULL "
        "ORDER BY id DESC LIMIT 1",
        [instance_id],
    ).fetchone()
    return found[0] if found else None


def _start_turn(db: sqlite_utils.Database, row: dict[str, Any]) -> int:
    with write_transaction(db):
        if not row["session_id"]:
            row = {**row, "session_id": _last_session(db, row["instance_id"])}
        turn = int(db["executor_turns"].insert(row).last_pk)  # type: ignore[arg-type]
        _entry(db, turn, "prompt", row["prompt"], None)
    return turn


def _set_session(db: sqlite_utils.Database, turn_id: int, session_id: str) -> None:
    db["executor_turns"].update(turn_id, {"session_id": session_id})


def _finish_turn(
    db: sqlite_utils.Database,
    turn_id: int,
    final_text: str,
    files_changed: str,
    usage: dict[str, Any] | None,
    state: str,
    session_id: str | None,
) -> None:
    with write_transaction(db):
        turn = db["executor_turns"].get(turn_id)
        told = db.execute(
            "SELECT 1 FROM executor_entries WHERE turn_id = ? AND kind IN "
            "('final', 'error') AND text = ?",
            [turn_id, final_text],
        ).fetchone()
        changes, entries = turn_end(
            turn, final_text, files_changed, usage, state, session_id, told is not None
        )
        db["executor_turns"].update(turn_id, changes)
        for kind, text in entries:
            _entry(db, turn_id, kind, text, None)


def instance_turns_of(db: sqlite_utils.Database, instance_id: str) -> list[dict[str, Any]]:
    """Every turn of an instance in order, each with its `entries` in order."""
    turns = list(
        db.query("SELECT * FROM executor_turns WHERE instance_id = ? ORDER BY id", [instance_id])
    )
    for turn in turns:
        turn["entries"] = list(
            db.query("SELECT * FROM executor_entries WHERE turn_id = ? ORDER BY id", [turn["id"]])
        )
    return turns


class SqliteRecordRows:
    """The executors' records on atlas.db (a HomeStore, or a worker's remote one)."""

    def __init__(self, store: HomeStore) -> None:
        self.store = store

    async def save_task(self, row: dict[str, Any]) -> None:
        await self.store.quick(functools.partial(_upsert, row=row))

    async def task(self, task_id: str) -> dict[str, Any] | None:
        return await self.store.quick(functools.partial(_select_one, task_id=task_id))

    async def latest_tasks(self, limit: int) -> list[dict[str, Any]]:
        return await self.store.call(functools.partial(_select_latest, limit=limit))

    async def interrupt_live_tasks(self, now: str) -> list[str]:
        return await self.store.quick(functools.partial(_interrupt_live, now=now))

    async def unreported_tasks(self) -> list[dict[str, Any]]:
        return await self.store.call(_select_unreported)

    async def mark_task_reported(self, task_id: str, now: str) -> None:
        await self.store.quick(functools.partial(_mark_reported, task_id=task_id, now=now))

    async def start_turn(self, row: dict[str, Any]) -> int:
        return await self.store.quick(functools.partial(_start_turn, row=row))

    async def set_turn_session(self, turn_id: int, session_id: str) -> None:
        await self.store.quick(
            functools.partial(_set_session, turn_id=turn_id, session_id=session_id)
        )

    async def add_entry(self, turn_id: int, kind: str, text: str, who: str | None) -> None:
        await self.store.quick(
            functools.partial(_entry, turn_id=turn_id, kind=kind, text=text, who=who)
        )

    async def finish_turn(
        self,
        turn_id: int,
        final_text: str,
        files_changed: str,
        usage: dict[str, Any] | None,
        state: str,
        session_id: str | None,
    ) -> None:
        await self.store.quick(
            functools.partial(
                _finish_turn,
                turn_id=turn_id,
                final_text=final_text,
                files_changed=files_changed,
                usage=usage,
                state=state,
                session_id=session_id,
            )
        )

    async def instance_turns(self, instance_id: str) -> list[dict[str, Any]]:
        return await self.store.call(functools.partial(instance_turns_of, instance_id=instance_id))

    # The search's SQL is in atlas/executors/record_search.py, beside its FTS5 index's readers.

    async def latest_instances(
        self, where: RecordFilter, *, limit: int, oldest: bool = False
    ) -> list[InstanceSummary]:
        return await self.store.call(
            functools.partial(latest_instances, where=where, limit=limit, oldest=oldest)
        )

    async def match_instances(
        self, text: str, where: RecordFilter, *, limit: int
    ) -> list[InstanceSummary]:
        return await self.store.call(
            functools.partial(match_instances, text=text, where=where, limit=limit)
        )

    async def matching_entries(
        self, text: str, instance_id: str, *, limit: int
    ) -> list[dict[str, Any]]:
        return await self.store.call(
            functools.partial(matching_entries, text=text, instance_id=instance_id, limit=limit)
        )


def record_rows(store: HomeStore | RecordRows) -> RecordRows:
    """The engine behind `store`: itself when it is one, else atlas.db's SQL over the
    HomeStore (the embedded default, and what every caller of today hands in)."""
    if isinstance(store, RecordRows):
        return store
    return SqliteRecordRows(store)
