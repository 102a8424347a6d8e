"""cronjob_manage in a worker process: the routine scheduler is the home's.

The scheduler runs in the home's process alone (one per home, atlas/routines/scheduler.py). A
worker's bots reach it over the worker's link, so a routine made, changed, paused or removed
from a worker's chat is scheduled at once (not at the scheduler's next poll of atlas.db), and
`run` starts a run now, as in one process. The ops:

  routines_sync        make the scheduler's jobs match atlas.db
  routines_run_now     start a routine's run now; its run id
  routines_next_fire   when a routine's job fires next (None: not scheduled)

The routines themselves are read and written through the worker's RemoteHomeStore (atlas.db's
work runs in the home's process too).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from atlas.errors import AtlasError, ToolError
from atlas.routines.store import Routine, RoutineStore
from atlas.store.home_db import HomeStore
from atlas.workers.link import Link, RemoteError

if TYPE_CHECKING:
    from atlas.routines.scheduler import RoutineScheduler

SYNC = "routines_sync"
RUN_NOW = "routines_run_now"
NEXT_FIRE = "routines_next_fire"
NOT_STARTED = (
    "the routine scheduler is not running (the daemon is starting or stopping); try again shortly"
)


class RemoteRoutines:
    """The Routines of atlas/tools/services.py in a worker: the home's scheduler, over `link`."""

    def __init__(self, link: Link, home_store: HomeStore) -> None:
        self._link = link
        self.store = RoutineStore(home_store)

    @property
    def running(self) -> bool:
        """While the link to the home's process is up (HomeServices.routines asks)."""
        return not self._link.closed.is_set()

    async def sync(self) -> None:
        await self._link.ask(SYNC)

    async def run_now(self, routine: Routine) -> int:
        try:
            run_id: int = await self._link.ask(RUN_NOW, routine)
        except RemoteError as exc:  # running already, not started yet: the model reads why
            raise ToolError(str(exc)) from None
        return run_id

    async def next_fire_time(self, routine_id: int) -> datetime | None:
        upcoming: datetime | None = await self._link.ask(NEXT_FIRE, routine_id)
        return upcoming


def serve_routines(link: Link, scheduler: Callable[[], RoutineScheduler | None]) -> None:
    """In the home's process: answer a worker's routine ops with `scheduler()` while it runs.
    Before its start (or once its stop began) a sync does nothing (its start reads atlas.db), a
    run is refused, and no fire time is known (the tool works it out from the schedule)."""

    def running() -> RoutineScheduler | None:
        current = scheduler()
        return current if current is not None and current.running else None

    async def sync() -> None:
        current = running()
        if current is not None:
            await current.sync()

    async def run_now(routine: Routine) -> int:
        current = running()
        if current is None:
            raise AtlasError(NOT_STARTED)
        return await current.run_now(routine)

    async def next_fire(routine_id: int) -> datetime | None:
        current = running()
        return await current.next_fire_time(routine_id) if current is not None else None

    link.on(SYNC, sync)
    link.on(RUN_NOW, run_now)
    link.on(NEXT_FIRE, next_fire)
