"""The seam between routines and the engine that keeps them and their runs.

`RoutineEngine` is what the scheduler, the runner, the CLI and the dashboard ask of routines:
`RoutineStore` (atlas/routines/store.py) on the home's atlas.db, the embedded default, and
`PgRoutineStore` (atlas/store/pg/routines.py) on the home's PostgreSQL database. On both a
scheduled fire is keyed by (routine, scheduled time): a second start of the same slot raises
`AlreadyFired`, so two schedulers firing a routine at the same time run it once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from atlas.routines.store import Routine, RoutineRun, RunResult, RunTrigger, Target


@runtime_checkable
class RoutineEngine(Protocol):
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
    ) -> Routine: ...

    async def get(self, routine_id: int) -> Routine | None: ...

    async def find(self, bot: str | None, key: str) -> Routine | None: ...

    async def all(self, bot: str | None = None) -> list[Routine]: ...

    async def update(
        self, routine_id: int, *, armed_at: str | None = None, **changes: Any
    ) -> Routine: ...

    async def remove(self, routine_id: int) -> bool: ...

    async def start_run(
        self, routine: Routine, trigger: RunTrigger, scheduled_for: datetime | None
    ) -> int: ...

    async def finish_run(self, run_id: int, result: RunResult) -> None: ...

    async def record_missed(self, routine: Routine, scheduled_for: datetime, why: str) -> int: ...

    async def runs(self, routine_id: int, limit: int = 20) -> list[RoutineRun]: ...

    async def get_run(self, run_id: int) -> RoutineRun | None: ...

    async def running(self, routine_id: int) -> RoutineRun | None: ...

    async def close_interrupted_runs(self, why: str) -> list[RoutineRun]: ...

    async def record_delivery(self, run_id: int, delivery: str) -> None: ...

    async def owed_reports(self, since: datetime) -> list[tuple[int, int, str]]: ...

    async def signature(self) -> str: ...
