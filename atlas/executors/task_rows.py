"""Delegations as rows: each executor task of Atlas's in `atlas.db` (table `executor_tasks`,
migration 007 of atlas/store/home_db.py), so that a restart loses none of them. The SQL is
behind `RecordRows` (atlas/executors/record_rows.py), PostgreSQL's beside it.

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

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.executors.record_rows import CUT_BY_STOP, LIVE_STATES, TASKS, RecordRows, record_rows
from atlas.executors.workbench import ENDED_STATES, Instance, InstanceControl
from atlas.store.db import utc_now_iso

if TYPE_CHECKING:
    from atlas.store.home_db import HomeStore

TABLE = TASKS
SUMMARY_CHARS = 2000  # the result kept in the row; the whole answer went into the notice
__all__ = ["CUT_BY_STOP", "LIVE_STATES", "TaskRows", "instance_of", "route_of", "snapshot"]


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


class TaskRows:
    """The `executor_tasks` table: of a home's atlas.db (a HomeStore, or a worker's remote
    one), or of any RecordRows engine (atlas/executors/record_rows.py; PostgreSQL's too)."""

    def __init__(self, store: HomeStore | RecordRows) -> None:
        self.store = store
        self.rows = record_rows(store)

    async def save(self, row: dict[str, Any]) -> None:
        """Write a task's snapshot (see `snapshot`), replacing its earlier one."""
        await self.rows.save_task(row)

    async def get(self, task_id: str) -> dict[str, Any] | None:
        return await self.rows.task(task_id.strip())

    async def latest(self, limit: int) -> list[dict[str, Any]]:
        """The latest tasks, newest first."""
        return await self.rows.latest_tasks(limit)

    async def interrupt_live(self) -> list[str]:
        """At start: tasks a killed process left running are interrupted. Their ids."""
        return await self.rows.interrupt_live_tasks(utc_now_iso())

    async def unreported(self) -> list[dict[str, Any]]:
        """Interrupted tasks whose conversation has not been told yet, oldest first."""
        return await self.rows.unreported_tasks()

    async def mark_reported(self, task_id: str) -> None:
        await self.rows.mark_task_reported(task_id, utc_now_iso())


def is_ended(row: dict[str, Any]) -> bool:
    return row["state"] in ENDED_STATES
