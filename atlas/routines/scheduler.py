"""One APScheduler per home, in the daemon, in the user's time zone.

Routines live in our own `atlas.db`, not in an APScheduler job store: at start the scheduler
decides about missed runs itself (one catch-up run when within grace, else one `missed` record,
never one run per missed slot), then gives APScheduler in-memory jobs. A run that is still going
when its next slot comes is not started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from atlas.errors import AtlasError
from atlas.routines.engine import RoutineEngine
from atlas.routines.files import ReconcileReport, reconcile_files
from atlas.routines.runner import RunsDetached, deliver_to_target, execute_run, report_key
from atlas.routines.schedule import (
    Schedule,
    ScheduleError,
    default_grace,
    last_fire_between,
    parse_schedule,
)
from atlas.routines.store import AlreadyFired, Routine, RoutineRun, RoutineStore, RunTrigger

if TYPE_CHECKING:
    from apscheduler.events import JobExecutionEvent
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from atlas.home import Home
    from atlas.store.home_db import HomeStore

log = logging.getLogger(__name__)

# How far back a start looks for reports an older Atlas left owed (before the outbox).
OWED_LOOK_BACK = timedelta(hours=24)
# A run handed to its bot's node (`_handed`): how often its record is read, and how long past
# the time limit it is followed (it may wait for a holder).
HANDED_POLL = 0.5
HANDED_MARGIN = 120.0


@dataclass(frozen=True)
class _JobKey:
    """What a job was made from: a change in any of it replaces the job."""

    schedule: str
    armed_at: datetime
    grace: float


class RoutineScheduler:
    def __init__(
        self,
        home: Home,
        home_store: HomeStore,
        dispatcher: RunsDetached,
        *,
        clock: Callable[[], datetime] | None = None,
        store: RoutineEngine | None = None,
    ) -> None:
        """`store`: where routines and runs live (atlas/routines/engine.py), by default the
        home's atlas.db through `home_store`."""
        self.home = home
        self.store: RoutineEngine = store if store is not None else RoutineStore(home_store)
        self.dispatcher = dispatcher
        self.tz = ZoneInfo(home.settings.timezone)
        self.settings = home.settings.routines
        self._clock = clock or (lambda: datetime.now(self.tz))
        self._aps: AsyncIOScheduler | None = None
        self._jobs: dict[int, _JobKey] = {}
        self._running: set[int] = set()  # routine ids with a run going
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watch_task: asyncio.Task[None] | None = None
        self._signature = ""
        self._lock_fd: int | None = None
        # From a successful start until stop begins: only then may cronjob_manage use it
        # (HomeServices.routines, atlas/agents/services.py).
        self.running = False
        # Told of every change a page shows: a run started or ended, routines synced (added,
        # changed, paused, resumed, removed). The dashboard's Routines page listens.
        self._listeners: list[Callable[[], None]] = []

    # On a node of a home on PostgreSQL (`atlas run --node`) the scheduler lease decides who
    # schedules; the file lock is then the node's own (nodes may share the home's folder, and a
    # paused node must not hold back the one that took the lease over).
    node: str | None = None

    @property
    def lock_path(self) -> Path:
        if self.node is not None:
            return self.home.root / "run" / f"routines-{self.node}.lock"
        return self.home.root / "routines.lock"

    async def start(self) -> ReconcileReport:
        """Take the home's scheduler lock, load the files, settle missed runs, schedule."""
        from apscheduler.events import EVENT_JOB_MISSED
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        self._take_lock()
        try:
            cut = await self.store.close_interrupted_runs("interrupted: Atlas stopped mid-run")
            if cut:
                log.warning("%d routine run(s) were interrupted by a stop", len(cut))
            # Reports an older Atlas left owed become outbox rows, ahead of the notices below.
            await self._adopt_owed_reports()
            await self._report_interrupted(cut)
            report = await reconcile_files(self.home, self.store)
            self._aps = AsyncIOScheduler(
                timezone=self.tz, job_defaults={"coalesce": True, "max_instances": 1}
            )
            self._aps.add_listener(self._on_missed, EVENT_JOB_MISSED)
            self._aps.start()
            await self._catch_up()
            await self.sync()
        except BaseException:
            await self.stop()
            raise
        self.running = True
        self._watch_task = asyncio.create_task(self._watch(), name="routines: watch")
        log.info("routines: %d scheduled (%s)", len(self._jobs), self.tz)
        return report

    async def _report_interrupted(self, runs: list[RoutineRun]) -> None:
        """A run cut short by a crash is not run again (its slot was taken); its target is
        told through the outbox, once per run (a start killed before recording it tells
        nobody twice: the row is keyed by the run), and the telling recorded."""
        for run in runs:
            routine = await self.store.get(run.routine_id)
            if routine is None:
                continue
            notice = (
                f'Routine "{routine.name}" was interrupted when Atlas stopped and did not '
                "finish; it runs again at its next time."
            )
            # A notice: should a crash catch it with the platform, no note follows it.
            delivery = await deliver_to_target(
                routine, self.dispatcher, notice, run_id=run.id, kind="notice"
            )
            await self.store.record_delivery(run.id, delivery)
            log.info("routine %s: %s", routine.name, delivery)

    async def _adopt_owed_reports(self) -> None:
        """Reports an Atlas from before the outbox left owed in `routine_runs.owed`: each
        becomes an outbox row keyed by its run (so adopting twice makes one), then is
        recorded; the outbox sends them."""
        owed = await self.store.owed_reports(since=self._clock() - OWED_LOOK_BACK)
        for run_id, routine_id, text in owed:
            routine = await self.store.get(routine_id)
            address = routine.address() if routine else None
            if routine is not None and address is not None:
                await self.dispatcher.outbox.enqueue(
                    address, text, kind="report", key=report_key(routine, run_id)
                )
            await self.store.record_delivery(run_id, "owed; handed to the outbox at a start")

    async def stop(self) -> None:
        """Stop scheduling; a run still going is cancelled and recorded as failed."""
        self.running = False
        if self._watch_task:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
            self._watch_task = None
        if self._aps is not None and self._aps.running:
            self._aps.shutdown(wait=False)
            await asyncio.sleep(0)  # the shutdown runs on the loop (call_soon_threadsafe)
        self._aps = None
        self._jobs.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._release_lock()

    async def reload(self) -> ReconcileReport:
        """Reconcile `routines/*.toml` with the stored routines, then reschedule."""
        report = await reconcile_files(self.home, self.store)
        await self.sync()
        return report

    async def sync(self) -> None:
        """Make the jobs match the stored routines (added, changed, paused, removed)."""
        if self._aps is None:
            return
        self._signature = await self.store.signature()
        wanted: dict[int, tuple[Routine, Schedule, _JobKey]] = {}
        now = self._clock()
        for routine in await self.store.all():
            schedule = self._schedulable(routine)
            if schedule is None:
                continue
            if schedule.once and _passed(schedule, now):
                continue  # a one-off whose time has passed: the catch-up at start decided
            key = _JobKey(routine.schedule, routine.armed_at, self._grace(routine, schedule))
            wanted[routine.id] = (routine, schedule, key)
        for routine_id in set(self._jobs) - set(wanted):
            with contextlib.suppress(LookupError):  # JobLookupError: already gone
                self._aps.remove_job(self._job_id(routine_id))
            del self._jobs[routine_id]
        for routine_id, (routine, schedule, key) in wanted.items():
            if self._jobs.get(routine_id) == key:
                continue
            self._aps.add_job(
                self._on_slot,
                trigger=schedule.trigger,
                args=[routine_id],
                id=self._job_id(routine_id),
                name=f"routine {routine.bot}/{routine.name}",
                replace_existing=True,
                misfire_grace_time=max(1, int(key.grace)),
                coalesce=True,
                max_instances=1,
            )
            self._jobs[routine_id] = key
        self._changed()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` (no arguments, on the loop) after each change: a run started or
        ended, a sync (routines added, changed, paused, resumed or removed), a missed run."""
        if callback not in self._listeners:
            self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in self._listeners:
            try:
                callback()
            except Exception:  # a listener's bug must not stop a run
                log.exception("routines: a listener failed")

    async def next_fire_time(self, routine_id: int) -> datetime | None:
        """When the routine's job fires next; None when it is not scheduled. Awaited, as the
        Routines protocol has it (a worker asks the home's scheduler over its link)."""
        if self._aps is None:
            return None
        job = self._aps.get_job(self._job_id(routine_id))
        return job.next_run_time if job else None

    def is_running(self, routine_id: int) -> bool:
        return routine_id in self._running

    async def run_now(self, routine: Routine) -> int:
        """Start a run in the background; its run id. Refused while one is going."""
        run_id = await self._begin(routine, "manual", self._clock())
        if run_id is None:
            raise AtlasError(f"routine {routine.name!r} is running already; wait for it to finish")
        self._keep(asyncio.create_task(self._finish(routine, run_id, None)))
        return run_id

    async def wait_runs(self) -> None:
        """Wait for the runs started in the background (tests, orderly shutdowns)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _on_slot(self, routine_id: int) -> None:
        """APScheduler's job: one scheduled run, awaited (so max_instances holds)."""
        routine = await self.store.get(routine_id)
        if routine is None or routine.paused:
            return
        schedule = self._schedulable(routine)
        due = last_fire_between(schedule, routine.armed_at, self._clock()) if schedule else None
        run_id = await self._begin(routine, "schedule", due)
        if run_id is None:
            if self.is_running(routine.id):
                log.warning(
                    "routine %s: still running at its next slot; not started twice", routine.name
                )
            return
        await self._finish(routine, run_id, due)

    async def _begin(
        self, routine: Routine, trigger: RunTrigger, due: datetime | None
    ) -> int | None:
        # Checked and marked with no await in between: two starts cannot both pass.
        if routine.id in self._running:
            return None
        self._running.add(routine.id)
        try:
            run_id = await self.store.start_run(routine, trigger, due)
        except AlreadyFired as exc:  # another scheduler of the home fired this slot
            self._running.discard(routine.id)
            log.info("%s; not run twice", exc)
            return None
        except BaseException:
            self._running.discard(routine.id)
            raise
        self._changed()
        return run_id

    async def _finish(self, routine: Routine, run_id: int, due: datetime | None) -> None:
        try:
            if await self._handed(routine, run_id, due):
                return
            await execute_run(
                routine,
                run_id,
                due,
                dispatcher=self.dispatcher,
                store=self.store,
                time_limit=self.settings.time_limit,
                tz=self.tz,
            )
        finally:
            self._running.discard(routine.id)
            self._changed()  # the run's end is recorded (or it was cut short)

    async def _handed(self, routine: Routine, run_id: int, due: datetime | None) -> bool:
        """On a node (`NodeRuns.hand_run`): a run of a bot held by another node runs there.
        Its record is then followed here until it ends (so the next slot is not started
        while it runs), for at most the time limit plus HANDED_MARGIN."""
        hand = getattr(self.dispatcher, "hand_run", None)
        if hand is None:
            return False
        try:
            if not await hand(routine, run_id, due):
                return False
        except Exception:  # not handed: run here rather than lose the fire
            log.exception("routine %s (run %d): not handed to its bot's node", routine.name, run_id)
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.time_limit + HANDED_MARGIN
        while loop.time() < deadline:
            run = await self.store.get_run(run_id)
            if run is None or run.status != "running":
                break
            await asyncio.sleep(HANDED_POLL)
        return True

    async def _catch_up(self) -> None:
        """After downtime: each routine that missed slots runs once (within grace) or has one
        `missed` record; never one per slot."""
        now = self._clock()
        for routine in await self.store.all():
            schedule = self._schedulable(routine)
            if schedule is None:
                continue
            runs = await self.store.runs(routine.id, limit=1)
            since = routine.armed_at
            if runs:
                last = datetime.fromisoformat(runs[0].scheduled_for or runs[0].started_at)
                since = max(since, last)
            missed = last_fire_between(schedule, since, now)
            if missed is None:
                continue
            late = now.astimezone(UTC) - missed.astimezone(UTC)  # elapsed, not wall-clock
            grace = timedelta(seconds=self._grace(routine, schedule))
            if late <= grace:
                log.info("routine %s missed %s; running it once now", routine.name, missed)
                run_id = await self._begin(routine, "catch-up", missed)
                if run_id is not None:
                    self._keep(asyncio.create_task(self._finish(routine, run_id, missed)))
            else:
                why = (
                    f"missed by {_short(late)} (grace {_short(grace)}): Atlas was not running; "
                    "it runs again at its next time"
                )
                with contextlib.suppress(AlreadyFired):  # recorded by another scheduler
                    await self.store.record_missed(routine, missed, why)
                    log.warning("routine %s: %s", routine.name, why)

    def _schedulable(self, routine: Routine) -> Schedule | None:
        if routine.paused:
            return None
        if routine.bot not in self.home.bots:
            log.warning(
                "routine %s: bot %r does not exist; not scheduled", routine.name, routine.bot
            )
            return None
        try:
            return parse_schedule(routine.schedule, self.tz, anchor=routine.armed_at)
        except ScheduleError as exc:
            log.warning("routine %s: not scheduled: %s", routine.name, exc)
            return None

    def _grace(self, routine: Routine, schedule: Schedule) -> float:
        if routine.grace_seconds is not None:
            return float(routine.grace_seconds)
        return default_grace(schedule, timedelta(seconds=self.settings.max_grace)).total_seconds()

    def _on_missed(self, event: JobExecutionEvent) -> None:
        """APScheduler skipped a slot past its grace (the machine slept): record it once."""
        routine_id = int(event.job_id.removeprefix("routine-"))
        self._keep(asyncio.create_task(self._record_missed(routine_id, event.scheduled_run_time)))

    async def _record_missed(self, routine_id: int, due: datetime) -> None:
        routine = await self.store.get(routine_id)
        if routine is not None:
            with contextlib.suppress(AlreadyFired):  # recorded (or run) by another scheduler
                await self.store.record_missed(
                    routine, due, "missed: the machine was asleep or busy past the routine's grace"
                )
            self._changed()

    async def _watch(self) -> None:
        """Pick up routines changed by another process (the CLI, `atlas chat`)."""
        while True:
            await asyncio.sleep(self.settings.poll_seconds)
            try:
                if await self.store.signature() != self._signature:
                    await self.sync()
            except Exception:  # the next poll tries again; the daemon must stay up
                log.exception("routines: could not pick up changes from %s", self.home.db_path)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _job_id(routine_id: int) -> str:
        return f"routine-{routine_id}"

    def _take_lock(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AtlasError(
                f"another Atlas is already running the routines of {self.home.root} "
                f"({self.lock_path} is locked); one scheduler per home"
            ) from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None


def _passed(schedule: Schedule, now: datetime) -> bool:
    fire = schedule.trigger.get_next_fire_time(None, now)
    return fire is None or fire <= now


def _short(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} d"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f} h"
    return f"{max(seconds, 0) // 60} min" if seconds >= 60 else f"{max(seconds, 0)} s"
