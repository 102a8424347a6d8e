"""What tools that start work elsewhere ask of the process running them: `run.services`.

delegate, message_agent, cronjob_manage and tool_search reach subagents, executor tasks, other
bots, the routine scheduler and the run's tool registry through these protocols, never by
importing the dispatcher, the agents or the scheduler: those sit above the tools and import
them. The dispatcher's layer implements them (atlas/agents/services.py) and puts one object
into every RunContext it makes. `run.services is None`: no dispatcher runs around this call
(a test, `atlas budget`); each tool says what it needs then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from pathlib import Path

    from atlas.executors.workbench import Instance, Workbench
    from atlas.home import Bot
    from atlas.routines.store import Routine, RoutineStore
    from atlas.store.home_db import HomeStore
    from atlas.store.home_engines import HomeEngines
    from atlas.tools.registry import Notifier, RunContext, ToolRegistry

# What a tool may say when a service needs a running dispatcher and there is none.
NEEDS_DISPATCHER = "no running dispatcher around this run: this needs the daemon or `atlas chat`"


class SubagentView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def goal(self) -> str: ...
    @property
    def status(self) -> str: ...


class BatchView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def subagents(self) -> Sequence[SubagentView]: ...
    def report(self) -> str: ...


@dataclass(frozen=True)
class ParentAnswer:
    """How a subagent's ask_parent ended: the parent's answer, or None and why there is none."""

    answer: str | None
    why: str = ""
    question_id: str = ""
    by: str = ""  # "the person" when they answered on the dashboard before the agent did


BatchT = TypeVar("BatchT", bound=BatchView)
SubagentT = TypeVar("SubagentT", bound=SubagentView)


class Subagents(Protocol[BatchT, SubagentT]):
    """delegate's subagents: child runs in the background (atlas/agents/subagents.py)."""

    async def spawn(self, run: RunContext, tasks: list[tuple[str, str]]) -> BatchT: ...
    async def wait(self, batch: BatchT) -> None: ...
    def notify_when_done(self, batch: BatchT, notify: Notifier) -> None: ...
    async def listing(self, run: RunContext) -> list[dict[str, Any]]: ...
    def find(self, run: RunContext, subagent_id: str) -> SubagentT | None: ...
    async def delegation(self, subagent_id: str) -> dict[str, Any] | None: ...
    def steer(self, sub: SubagentT, message: str) -> None: ...
    def stop(self, sub: SubagentT, reason: str) -> None: ...
    async def ask_parent(self, run: RunContext, question: str) -> ParentAnswer:
        """Put a subagent run's question to the conversation that started it; wait for the
        answer (delegate action=answer) up to [agents] ask_parent_seconds."""
        ...

    def answer(self, sub: SubagentT, message: str) -> str:
        """Answer the subagent's open question; its id. ToolError when none is open."""
        ...


class ExecutorWork(Protocol):
    """delegate's executor tasks and the workbench (atlas/executors/tasks.py)."""

    @property
    def workbench(self) -> Workbench: ...
    def targets(self) -> list[str]: ...
    async def start(
        self, run: RunContext, target: str, folder: Path, goal: str, route: list[str] | None
    ) -> Instance: ...
    async def resume(
        self,
        run: RunContext,
        instance_id: str,
        message: str,
        target: str | None,
        route: list[str] | None,
    ) -> Instance: ...
    async def wait(self, instance_ids: list[str]) -> str:
        """Until these tasks end; their reports."""
        ...

    async def steer(self, instance_id: str, message: str) -> str: ...
    async def stop(self, instance_id: str, reason: str) -> None: ...
    async def login(self, run: RunContext, target: str, email: str | None) -> str:
        """Start the harness's own login for an account; what to open in the browser."""
        ...


class Routines(Protocol):
    """cronjob_manage's view of the running routine scheduler (atlas/routines/scheduler.py);
    in a worker process, the home's scheduler over the worker's link (atlas/workers/routines.py),
    hence every call may cross processes and is awaited."""

    @property
    def store(self) -> RoutineStore: ...
    async def sync(self) -> None: ...
    async def run_now(self, routine: Routine) -> int: ...
    async def next_fire_time(self, routine_id: int) -> datetime | None: ...


class AgentServices(Protocol):
    """The services of a running home, one object per dispatcher."""

    def registry(self, bot: Bot) -> ToolRegistry:
        """The tools the bot's runs have (tool_search loads the deferred ones)."""
        ...

    @property
    def home_store(self) -> HomeStore:
        """atlas.db, open for the life of the process (do not close it). In a worker process
        each call runs in the home's process, the file's one writer: a tool never opens the
        file itself where services exist."""
        ...

    @property
    def engines(self) -> HomeEngines:
        """The home's engines (atlas/store/home_engines.py): its routines, the executors'
        records and the rest, on atlas.db or on the home's PostgreSQL database."""
        ...

    @property
    def subagents(self) -> Subagents[Any, Any]: ...

    @property
    def executors(self) -> ExecutorWork | None:
        """The executor tasks and the workbench; None when no executor is turned on."""
        ...

    @property
    def routines(self) -> Routines | None:
        """The running scheduler; None when none runs in this process (only the daemon's)."""
        ...

    async def message_bot(self, run: RunContext, target: str, message: str) -> str:
        """Start a turn of bot `target` in its conversation with run.bot; the reply comes back
        later through run.notify. Returns the delivery id; ToolError when it cannot go."""
        ...
