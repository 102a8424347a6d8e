"""Delegations as rows: each executor task of Atlas's in `atlas.db` (table `executor_tasks`,
migration 007 of atlas/store/home_db.py), so that a restart loses none of them.

The workbench (atlas/executors/workbench.py) holds the live instances in memory; every change
of one of Atlas's tasks that matters after a restart (started, its harness's session id, a
question, a move to another account, a resume, its end) is written here as a whole snapshot of
the instance, with the task's goal, route, last event and result summary. After a restart:

- the workbench is filled back from the latest rows (`delegate action=list` shows them);
- `delegate action=resume` rebuilds the task from its row (ExecutorTasks.resume) and goes on
  in the recorded session;
- a row still `running` or `asking` (the process was killed) and one a stop ended (the daemon
  stopped while it ran) are `interrupted`, and each is reported once to the conversation that
  started it, as a notice (atlas/executors/restart.py).

    rows = TaskRows(home_store)
    await rows.save(instance, goal=..., route=..., last_event="started")
    row = await rows.get("ex-3f9a2c")

The person's own sessions are not rows: they live in their own harness, and the delegation
record (atlas/executors/record.py) keeps what they did.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from atlas.executors.workbench import ENDED_STATES, INTERRUPTED, Instance, InstanceControl
from atlas.store.db import fetch_dicts, utc_now_iso, write_transaction

if TYPE_CHECKING:
    from atlas.store.home_db import HomeStore

TABLE = "executor_tasks"
SUMMARY_CHARS = 2000  # the result kept in the row; the whole answer went into the notice
CUT_BY_STOP = "Atlas stopped while it ran"
LIVE_STATES = ("running", "asking")


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="microseconds") if moment else None


def snapshot(
    instance: Instance,
    *,
    goal: str,
    route: list[str] | None,
    last_event: str,
    run_kind: str,
    result_summary: str | None = None,
) -> dict[str, Any]:
    """The row of an instance now. `reported_at` is cleared: a new state has not been told."""
    return {
        "id": instance.id,
        "bot": instance.bot,
        "conversation_id": instance.conversation_id,
        "run_kind": run_kind,
        "executor": instance.executor,
        "account": instance.account,
        "folder": str(instance.folder),
        "goal": goal,
        "title": instance.title,
        "route": json.dumps(route) if route is not None else None,
        "session_id": instance.session_id,
        "state": instance.state,
        "detail": instance.detail,
        "last_event": last_event,
        "result_summary": result_summary[:SUMMARY_CHARS] if result_summary else None,
        "started_at": _iso(instance.started_at),
        "ended_at": _iso(instance.ended_at),
        "updated_at": utc_now_iso(),
        "reported_at": None,
    }


def instance_of(row: dict[str, Any], control: InstanceControl | None = None) -> Instance:
    """The workbench's instance of a row."""
    ended = row.get("ended_at")
    return Instance(
        row["id"],
        row["executor"],
        row["account"],
        Path(row["folder"]),
        state=row["state"],
        owner="atlas",
        session_id=row.get("session_id"),
        started_at=datetime.fromisoformat(row["started_at"]),
        title=row.get("title") or "",
        bot=row.get("bot"),
        conversation_id=row.get("conversation_id"),
        detail=row.get("detail") or "",
        ended_at=datetime.fromisoformat(ended) if ended else None,
        control=control,
    )


def route_of(row: dict[str, Any]) -> list[str] | None:
    raw = row.get("route")
    return list(json.loads(raw)) if raw else None


# Module functions with their data (functools.partial): from a worker process they cross to
# the home's process pickled (atlas/workers/home_db.py).


def _upsert(db: sqlite_utils.Database, row: dict[str, Any]) -> None:
    db[TABLE].upsert(row, pk="id")


def _select_one(db: sqlite_utils.Database, task_id: str) -> dict[str, Any] | None:
    rows = fetch_dicts(db, f"SELECT * FROM {TABLE} WHERE id = ?", [task_id])
    return rows[0] if rows else None


def _select_latest(db: sqlite_utils.Database, limit: int) -> list[dict[str, Any]]:
    return fetch_dicts(db, f"SELECT * FROM {TABLE} ORDER BY started_at DESC, id LIMIT ?", [limit])


def _interrupt_live(db: sqlite_utils.Database, now: str) -> list[str]:
    """Rows a killed process left running or asking are interrupted; so are their record's
    open turns. Returns their ids."""
    marks = ", ".join("?" for _ in LIVE_STATES)
    with write_transaction(db):
        ids = [
            row[0]
            for row in db.execute(f"SELECT id FROM {TABLE} WHERE state IN ({marks})", LIVE_STATES)
        ]
        db.execute(
            f"UPDATE {TABLE} SET state = ?, detail = ?, ended_at = ?, updated_at = ?, "
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
        f"SELECT * FROM {TABLE} WHERE state = ? AND reported_at IS NULL ORDER BY started_at",
        [INTERRUPTED],
    )


def _mark_reported(db: sqlite_utils.Database, task_id: str, now: str) -> None:
    db.execute(f"UPDATE {TABLE} SET reported_at = ? WHERE id = ?", [now, task_id])


class TaskRows:
    """The `executor_tasks` table of a home's atlas.db (a HomeStore, or a worker's remote one)."""

    def __init__(self, store: HomeStore) -> None:
        self.store = store

    async def save(self, row: dict[str, Any]) -> None:
        """Write a task's snapshot (see `snapshot`), replacing its earlier one."""
        await self.store.quick(functools.partial(_upsert, row=row))

    async def get(self, task_id: str) -> dict[str, Any] | None:
        return await self.store.quick(functools.partial(_select_one, task_id=task_id.strip()))

    async def latest(self, limit: int) -> list[dict[str, Any]]:
        """The latest tasks, newest first."""
        return await self.store.call(functools.partial(_select_latest, limit=limit))

    async def interrupt_live(self) -> list[str]:
        """At start: tasks a killed process left running are interrupted. Their ids."""
        return await self.store.quick(functools.partial(_interrupt_live, now=utc_now_iso()))

    async def unreported(self) -> list[dict[str, Any]]:
        """Interrupted tasks whose conversation has not been told yet, oldest first."""
        return await self.store.call(_select_unreported)

    async def mark_reported(self, task_id: str) -> None:
        await self.store.quick(
            functools.partial(_mark_reported, task_id=task_id, now=utc_now_iso())
        )


def is_ended(row: dict[str, Any]) -> bool:
    return row["state"] in ENDED_STATES
