"""Routines and their runs in the home's `atlas.db` (tables made by migration 004_routines)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from atlas.channels.base import Address
from atlas.errors import AtlasError
from atlas.routines.targets import delivered_badly
from atlas.store.db import utc_now_iso, write_transaction
from atlas.store.home_db import HomeStore

if TYPE_CHECKING:
    # Only in annotations: imported at run time before atlas.store, sqlite-utils would load
    # pandas (atlas/store/__init__.py), over a second of every daemon start.
    import sqlite_utils

RunStatus = Literal["running", "ok", "failed", "silent", "skipped", "missed", "timeout"]
RunTrigger = Literal["schedule", "catch-up", "manual"]
TEXT_KEPT = 2000  # characters of a run's final text kept in its record


class RoutineError(AtlasError):
    """A routine that cannot be stored or found as asked."""


class AlreadyFired(RoutineError):
    """A scheduled slot of a routine has a run (or a missed record) already: another scheduler
    fired it. A fire is keyed by (routine, scheduled time), so it runs once across the home."""

    def __init__(self, routine: str, scheduled_for: str) -> None:
        super().__init__(f"routine {routine!r}: its fire for {scheduled_for} has run already")


def fire_key(trigger: str, scheduled_for: datetime | None) -> str | None:
    """The slot a run fires for, when it must be unique: scheduled and catch-up runs and
    missed records, never a manual run (a person may run a routine whenever they like)."""
    if trigger == "manual" or scheduled_for is None:
        return None
    return scheduled_for.isoformat()


@dataclass(frozen=True)
class Target:
    """Where a routine's results go: a conversation's address without the bot."""

    channel: str
    chat: str
    thread: str = ""
    user: str = ""

    def __str__(self) -> str:
        extra = "".join(f" {k} {v}" for k, v in (("thread", self.thread), ("user", self.user)) if v)
        return f"{self.channel}:{self.chat}{extra}"

    @classmethod
    def of(cls, address: Address) -> Target:
        """The target that delivers to `address` (a routine's own address, or one like it)."""
        return cls(address.channel, address.chat, address.thread, address.user)


@dataclass(frozen=True)
class Routine:
    id: int
    bot: str
    name: str
    prompt: str
    schedule: str
    target: Target | None
    paused: bool
    grace_seconds: int | None
    source: str
    source_digest: str
    armed_at: datetime
    created_at: str
    updated_at: str
    precheck: str = ""  # a command whose exit status decides if the model is called

    def address(self) -> Address | None:
        if self.target is None:
            return None
        t = self.target
        return Address(self.bot, t.channel, t.chat, t.thread, t.user)


@dataclass(frozen=True)
class RoutineRun:
    id: int
    routine_id: int
    bot: str
    name: str
    trigger: str
    scheduled_for: str | None
    started_at: str
    ended_at: str | None
    status: str
    input_tokens: int
    output_tokens: int
    delivery: str
    conversation_id: int | None
    error: str
    text: str

    @property
    def outcome(self) -> str:
        """The status as shown: a run that went well but whose report did not (surely) reach
        its target is `undelivered`, never a green `ok`."""
        return "undelivered" if delivered_badly(self.status, self.delivery) else self.status


@dataclass
class RunResult:
    """How a run ended, to record."""

    status: RunStatus
    delivery: str = ""
    error: str = ""
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    conversation_id: int | None = None


def _routine(row: dict[str, Any]) -> Routine:
    target = (
        Target(row["channel"], row["chat"] or "", row["thread"] or "", row["user"] or "")
        if row["channel"]
        else None
    )
    return Routine(
        id=row["id"],
        bot=row["bot"],
        name=row["name"],
        prompt=row["prompt"],
        schedule=row["schedule"],
        target=target,
        paused=bool(row["paused"]),
        grace_seconds=row["grace_seconds"],
        source=row["source"] or "tool",
        source_digest=row["source_digest"] or "",
        armed_at=datetime.fromisoformat(row["armed_at"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        precheck=row.get("precheck") or "",
    )


def _run(row: dict[str, Any]) -> RoutineRun:
    return RoutineRun(
        id=row["id"],
        routine_id=row["routine_id"],
        bot=row["bot"],
        name=row["name"],
        trigger=row["trigger"],
        scheduled_for=row["scheduled_for"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        status=row["status"],
        input_tokens=row["input_tokens"] or 0,
        output_tokens=row["output_tokens"] or 0,
        delivery=row["delivery"] or "",
        conversation_id=row["conversation_id"],
        error=row["error"] or "",
        text=row["text"] or "",
    )


def _target_columns(target: Target | None) -> dict[str, str]:
    t = target or Target("", "")
    return {"channel": t.channel, "chat": t.chat, "thread": t.thread, "user": t.user}


def _armed(given: str | None, now: str) -> str:
    """When a routine counts from: `given` (a file's write), never later than now."""
    return min(given, now) if given else now


def new_routine_row(
    bot: str,
    name: str,
    prompt: str,
    schedule: str,
    target: Target | None,
    *,
    paused: bool,
    grace_seconds: int | None,
    source: str,
    source_digest: str,
    armed_at: str | None,
    precheck: str,
) -> dict[str, Any]:
    """A new routine's row, the same on both engines."""
    now = utc_now_iso()
    return {
        "bot": bot,
        "name": name,
        "prompt": prompt,
        "schedule": schedule,
        **_target_columns(target),
        "paused": int(paused),
        "grace_seconds": grace_seconds,
        "source": source,
        "source_digest": source_digest,
        "armed_at": _armed(armed_at, now),
        "created_at": now,
        "updated_at": now,
        "precheck": precheck,
    }


def name_taken(bot: str, name: str) -> RoutineError:
    return RoutineError(
        f"bot {bot!r} already has a routine named {name!r}; pick another name or update that one"
    )


def changed_columns(current: Routine, changes: dict[str, Any], armed_at: str | None) -> None:
    """`changes` as columns, in place: a Target split, `paused` as 0/1, `updated_at` set; a new
    schedule or a resume re-arms the routine: slots before now (or before `armed_at`, when the
    user changed it earlier) are not missed runs."""
    if "target" in changes:
        changes.update(_target_columns(changes.pop("target")))
    if "paused" in changes:
        changes["paused"] = int(changes["paused"])
    now = utc_now_iso()
    changes["updated_at"] = now
    resumed = current.paused and changes.get("paused") == 0
    if changes.get("schedule", current.schedule) != current.schedule or resumed:
        changes["armed_at"] = _armed(armed_at, now)


def start_row(
    routine: Routine, trigger: RunTrigger, scheduled_for: datetime | None
) -> dict[str, Any]:
    """A run's row as it starts."""
    return {
        "routine_id": routine.id,
        "bot": routine.bot,
        "name": routine.name,
        "trigger": trigger,
        "scheduled_for": scheduled_for.isoformat() if scheduled_for else None,
        "started_at": utc_now_iso(),
        "status": "running",
    }


def missed_row(routine: Routine, scheduled_for: datetime, why: str) -> dict[str, Any]:
    """The row of a slot that was missed (it starts and ends at once)."""
    now = utc_now_iso()
    return {
        "routine_id": routine.id,
        "bot": routine.bot,
        "name": routine.name,
        "trigger": "schedule",
        "scheduled_for": scheduled_for.isoformat(),
        "started_at": now,
        "ended_at": now,
        "status": "missed",
        "delivery": "",
        "error": why,
    }


def finished_columns(result: RunResult) -> dict[str, Any]:
    """What a run's end writes into its row."""
    return {
        "ended_at": utc_now_iso(),
        "status": result.status,
        "delivery": result.delivery,
        "error": result.error,
        "text": result.text[:TEXT_KEPT],
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "conversation_id": result.conversation_id,
    }


class RoutineStore:
    """Reads and writes routines through the home's store (its one writer thread)."""

    def __init__(self, home_store: HomeStore) -> None:
        self.home_store = home_store

    async def create(
        self,
        bot: str,
        name: str,
        prompt: str,
        schedule: str,
        target: Target | None,
        *,
        paused: bool = False,
        grace_seconds: int | None = None,
        source: str = "tool",
        source_digest: str = "",
        armed_at: str | None = None,
        precheck: str = "",
    ) -> Routine:
        """`armed_at`: when the user set it up, if before now (a file written while Atlas was
        down: slots after that are missed runs, per the downtime rule)."""
        row = new_routine_row(
            bot,
            name,
            prompt,
            schedule,
            target,
            paused=paused,
            grace_seconds=grace_seconds,
            source=source,
            source_digest=source_digest,
            armed_at=armed_at,
            precheck=precheck,
        )

        def insert(db: sqlite_utils.Database) -> int:
            return int(db["routines"].insert(row).last_pk)  # type: ignore[arg-type]

        try:
            routine_id = await self.home_store.call(insert)
        except sqlite3.IntegrityError:
            raise name_taken(bot, name) from None
        found = await self.get(routine_id)
        assert found is not None  # just inserted
        return found

    async def get(self, routine_id: int) -> Routine | None:
        rows = await self._select("SELECT * FROM routines WHERE id = ?", [routine_id])
        return _routine(rows[0]) if rows else None

    async def find(self, bot: str | None, key: str) -> Routine | None:
        """A routine by id or by name; with `bot`, only that bot's."""
        where, params = ("name = ?", [key])
        if key.strip().isdigit():
            where, params = ("(id = ? OR name = ?)", [int(key), key])
        if bot is not None:
            where += " AND bot = ?"
            params.append(bot)
        rows = await self._select(f"SELECT * FROM routines WHERE {where} ORDER BY id", params)
        if len(rows) > 1:
            bots = ", ".join(sorted(r["bot"] for r in rows))
            raise RoutineError(f"{key!r} names routines of several bots ({bots}); give --bot")
        return _routine(rows[0]) if rows else None

    async def all(self, bot: str | None = None) -> list[Routine]:
        if bot is None:
            rows = await self._select("SELECT * FROM routines ORDER BY bot, name", [])
        else:
            rows = await self._select("SELECT * FROM routines WHERE bot = ? ORDER BY name", [bot])
        return [_routine(r) for r in rows]

    async def update(
        self, routine_id: int, *, armed_at: str | None = None, **changes: Any
    ) -> Routine:
        """Change columns; `target` may be given as a Target. A new schedule or a resume
        re-arms the routine: slots before now (or before `armed_at`, when the user changed it
        earlier) are not missed runs."""
        current = await self.get(routine_id)
        if current is None:
            raise RoutineError(f"there is no routine {routine_id}")
        changed_columns(current, changes, armed_at)

        def write(db: sqlite_utils.Database) -> None:
            db["routines"].update(routine_id, changes)

        try:
            await self.home_store.call(write)
        except sqlite3.IntegrityError:
            raise RoutineError(
                f"another routine of this bot is already named {changes.get('name')!r}"
            ) from None
        found = await self.get(routine_id)
        if found is None:
            raise RoutineError(f"there is no routine {routine_id}")
        return found

    async def remove(self, routine_id: int) -> bool:
        def delete(db: sqlite_utils.Database) -> bool:
            cursor = db.execute("DELETE FROM routines WHERE id = ?", [routine_id])
            return cursor.rowcount > 0

        return await self.home_store.call(delete)

    async def start_run(
        self, routine: Routine, trigger: RunTrigger, scheduled_for: datetime | None
    ) -> int:
        """A new run's id; `AlreadyFired` when its slot has a run already."""
        row = start_row(routine, trigger, scheduled_for)
        return await self._insert_fire(routine, row, fire_key(trigger, scheduled_for))

    async def _insert_fire(self, routine: Routine, row: dict[str, Any], key: str | None) -> int:
        """Insert a run's row, refused when `key` (its slot) has one: checked and written in one
        write transaction (BEGIN IMMEDIATE), so two processes on the file take turns."""

        def insert(db: sqlite_utils.Database) -> int | None:
            with write_transaction(db):
                if key is not None and list(
                    db.query(
                        "SELECT 1 FROM routine_runs WHERE routine_id = ? AND scheduled_for = ? "
                        "AND trigger <> 'manual' LIMIT 1",
                        [routine.id, key],
                    )
                ):
                    return None
                return int(db["routine_runs"].insert(row).last_pk)  # type: ignore[arg-type]

        run_id = await self.home_store.call(insert)
        if run_id is None:
            raise AlreadyFired(routine.name, key or "")
        return run_id

    async def finish_run(self, run_id: int, result: RunResult) -> None:
        row = finished_columns(result)
        await self.home_store.call(lambda db: db["routine_runs"].update(run_id, row))

    async def record_missed(self, routine: Routine, scheduled_for: datetime, why: str) -> int:
        row = missed_row(routine, scheduled_for, why)
        return await self._insert_fire(routine, row, scheduled_for.isoformat())

    async def runs(self, routine_id: int, limit: int = 20) -> list[RoutineRun]:
        """A routine's runs, newest first."""
        rows = await self._select(
            "SELECT * FROM routine_runs WHERE routine_id = ? ORDER BY id DESC LIMIT ?",
            [routine_id, limit],
        )
        return [_run(r) for r in rows]

    async def get_run(self, run_id: int) -> RoutineRun | None:
        rows = await self._select("SELECT * FROM routine_runs WHERE id = ?", [run_id])
        return _run(rows[0]) if rows else None

    async def running(self, routine_id: int) -> RoutineRun | None:
        rows = await self._select(
            "SELECT * FROM routine_runs WHERE routine_id = ? AND status = 'running' "
            "ORDER BY id DESC LIMIT 1",
            [routine_id],
        )
        return _run(rows[0]) if rows else None

    async def close_interrupted_runs(self, why: str) -> list[RoutineRun]:
        """Runs left `running` by a crash become failed, with the reason. Returns every run
        so closed whose target has not been told yet (no delivery recorded), including those
        closed by an earlier start that was itself killed before telling."""

        def close(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            db.execute(
                "UPDATE routine_runs SET status = 'failed', ended_at = :now, error = :why "
                "WHERE status = 'running'",
                {"now": utc_now_iso(), "why": why},
            )
            return list(
                db.query(
                    "SELECT * FROM routine_runs WHERE status = 'failed' AND error = ? "
                    "AND COALESCE(delivery, '') = '' ORDER BY id",
                    [why],
                )
            )

        return [_run(row) for row in await self.home_store.call(close)]

    async def record_delivery(self, run_id: int, delivery: str) -> None:
        """How the run's message went (the outbox has the row: atlas/outbox/)."""
        await self.home_store.call(
            lambda db: db["routine_runs"].update(run_id, {"delivery": delivery, "owed": None})
        )

    async def owed_reports(self, since: datetime) -> list[tuple[int, int, str]]:
        """(run id, routine id, message) of every run since then whose message an older Atlas
        left owed in `routine_runs.owed` (before the outbox), oldest first."""
        rows = await self._select(
            "SELECT id, routine_id, owed FROM routine_runs WHERE owed IS NOT NULL "
            "AND started_at >= ? ORDER BY id",
            [since.astimezone(UTC).isoformat(timespec="microseconds")],
        )
        return [(row["id"], row["routine_id"], row["owed"]) for row in rows]

    async def signature(self) -> str:
        """Changes whenever a routine is added, changed or removed (for the daemon's poll)."""
        rows = await self._select(
            "SELECT COUNT(*) AS n, COALESCE(MAX(updated_at), '') AS at, "
            "COALESCE(SUM(id), 0) AS ids FROM routines",
            [],
        )
        return f"{rows[0]['n']}/{rows[0]['at']}/{rows[0]['ids']}"

    async def _select(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        return await self.home_store.call(lambda db: list(db.query(sql, params)))
