"""The services a running home gives its tools (the AgentServices of atlas/tools/services.py).

Built over one Dispatcher by `provide_services` (atlas/services.py's start_core does it) and
handed to every run through `Dispatcher.services` → RunContext.services: subagents for
delegate, the agents channel for message_agent, the daemon's routine scheduler for
cronjob_manage, the runtime's registry for tool_search. Nothing here is looked up by home.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from atlas.agents.channel import AGENTS_CHANNEL, AgentChannel, Delivery
from atlas.agents.subagents import SubagentManager, new_id
from atlas.channels.base import Address
from atlas.dispatch import Dispatcher
from atlas.errors import ToolError
from atlas.executors.record import DelegationRecord
from atlas.executors.task_rows import TaskRows
from atlas.executors.tasks import ExecutorTasks
from atlas.executors.workbench import Workbench
from atlas.home import Bot
from atlas.store.home_db import HomeStore
from atlas.store.home_engines import HomeEngines
from atlas.tools.registry import RunContext, ToolRegistry
from atlas.workers.routines import RemoteRoutines
from atlas.workers.routing import Elsewhere, agents_address

if TYPE_CHECKING:  # the home's process loads it once its bots answer (atlas/daemon.py)
    from atlas.routines.scheduler import RoutineScheduler

log = logging.getLogger(__name__)


class HomeServices:
    """AgentServices over one running Dispatcher."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._subagents: SubagentManager | None = None
        # The daemon's scheduler; in a worker process, the home's over the link.
        self._routines: RoutineScheduler | RemoteRoutines | None = None
        self._executors: ExecutorTasks | None = None
        # Every executor instance of the home: delegate's tasks and the sessions the Claude Code
        # plugin reports (atlas/executors/bridge.py adds the person's own here).
        self.workbench = Workbench()

    def registry(self, bot: Bot) -> ToolRegistry:
        return self.dispatcher.runtime.registry

    @property
    def home_store(self) -> HomeStore:
        """The runtime's atlas.db: in a worker, a RemoteHomeStore (the home's process runs it)."""
        return self.dispatcher.runtime.audit

    @property
    def engines(self) -> HomeEngines:
        """The runtime's engines: atlas.db's (in a worker, over the link), or PostgreSQL's."""
        return self.dispatcher.runtime.engines

    @property
    def subagents(self) -> SubagentManager:
        """Made on first use; `close` stops the subagents still running."""
        if self._subagents is None:
            self._subagents = SubagentManager(self.dispatcher)
        return self._subagents

    @property
    def executors(self) -> ExecutorTasks | None:
        """delegate's executor tasks and the workbench, made on first use; None while no
        installed executor is turned on."""
        if self._executors is None:
            home = self.dispatcher.runtime.home
            if not any(s.enabled for s in home.settings.executors.values()):
                return None
            self._executors = ExecutorTasks(
                home,
                workbench=self.workbench,
                record=delegation_record(self.dispatcher, self.workbench),
                rows=TaskRows(self.home_store),  # delegations as rows: they survive a restart
            )
        return self._executors

    @property
    def routines(self) -> RoutineScheduler | RemoteRoutines | None:
        """The daemon's scheduler while it runs (from its start until its stop begins); in a
        worker process, the home's, while the link to it is up."""
        scheduler = self._routines
        return scheduler if scheduler is not None and scheduler.running else None

    def serve_routines(self, scheduler: RoutineScheduler | RemoteRoutines | None) -> None:
        """cronjob_manage uses `scheduler` while it runs (the daemon hands it in; a worker
        process hands in the home's, atlas/workers/child.py)."""
        self._routines = scheduler

    async def message_bot(self, run: RunContext, target: str, message: str) -> str:
        def framed(delivery_id: str) -> str:
            return f"[Message from bot {run.bot.name!r}, delivery {delivery_id}]\n{message}"

        elsewhere = self.dispatcher.elsewhere
        if isinstance(elsewhere, Elsewhere) and not elsewhere.is_here(
            agents_address(target, run.bot.name)
        ):
            delivery_id = new_id("msg")  # served by another worker: delivered there
            await elsewhere.deliver(
                delivery_id, run.bot.name, target, framed(delivery_id), run.notify
            )
            return delivery_id
        from atlas.cluster.home_node import NodeElsewhere  # loaded already on a node

        if isinstance(elsewhere, NodeElsewhere) and not elsewhere.is_here(
            agents_address(target, run.bot.name)
        ):
            delivery_id = new_id("msg")  # held by another node: delivered there
            await elsewhere.deliver(
                delivery_id, run.bot.name, target, framed(delivery_id), run.notify
            )
            return delivery_id
        channel = self.dispatcher.channels.get(AGENTS_CHANNEL)
        if not isinstance(channel, AgentChannel):
            raise ToolError(f"the {AGENTS_CHANNEL!r} channel is not running in this process")
        delivery = Delivery(
            id=new_id("msg"),
            sender=run.bot.name,
            target=target,
            address=Address(target, AGENTS_CHANNEL, run.bot.name),
            notify=run.notify,
        )
        await channel.deliver(self.dispatcher, delivery, framed(delivery.id))
        return delivery.id

    async def close(self) -> None:
        """Stop running subagents and drop their pending notices. Call before
        Dispatcher.shutdown()."""
        self._routines = None
        if self._subagents is not None:
            await self._subagents.close()
        if self._executors is not None:
            await self._executors.close()


def delegation_record(dispatcher: Dispatcher, workbench: Workbench) -> DelegationRecord:
    """The delegation record in atlas.db (atlas/executors/record.py), taking the folder's diff
    stat before each turn and the harness's session ids off the workbench.

    THE ONE CALL SITE of the record for executor tasks: every turn, steer, question, answer and
    end goes through the object made here (ExecutorTasks._record)."""
    runtime = dispatcher.runtime
    record = DelegationRecord(runtime.engines.records, home=runtime.home)
    record.follow(workbench)
    return record


def provide_services(dispatcher: Dispatcher) -> HomeServices:
    """Give the dispatcher's runs their services (replaces earlier ones)."""
    services = HomeServices(dispatcher)
    dispatcher.services = services
    return services
