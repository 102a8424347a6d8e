"""What the dashboard (in the home's process) does in the worker processes: their bots' turns,
conversation states, subagents and executor tasks live there. The ops, home -> worker:

  bot_settings           a bot's new settings (its mode changed on Trust): every process keeps
                         every bot, so every worker takes them; /status there shows the mode
  conversation_modes     the modes its conversations chose with /mode: (bot, id, mode) each
  set_conversation_mode  set one (or "" for the bot's own); the mode it had; None: not here
  workbench_list         its executor instances and running subagents, as plain views
  workbench_act          steer or stop one of them by id; how it went, None: not here

`Workers.of(dispatcher)` is the home's side: None when the home runs in one process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from atlas.config import BotSettings
from atlas.errors import AtlasError
from atlas.executors.workbench import Instance
from atlas.workers.link import Link, LinkClosed, RemoteError

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

BOT_SETTINGS = "bot_settings"
CONVERSATION_MODES = "conversation_modes"
SET_CONVERSATION_MODE = "set_conversation_mode"
WORKBENCH_LIST = "workbench_list"
WORKBENCH_ACT = "workbench_act"
QUICK_OP_WAIT = 5.0  # seconds a page waits for a worker's list or a mode change


@dataclass(frozen=True)
class AskedView:
    text: str


@dataclass(frozen=True)
class SubagentView:
    """A worker's running subagent as the Workbench shows it."""

    id: str
    status: str
    bot: str
    parent_conversation_id: int
    rounds: int
    goal: str
    question: AskedView | None
    share: int


@dataclass(frozen=True)
class Acted:
    """What a worker did on the Workbench's behalf, for the gate's log."""

    how: str
    bot: str
    summary: str


class RemoteControl:
    """An executor instance's control, for an instance a worker runs (InstanceControl)."""

    def __init__(self, workers: Workers, share: int, instance_id: str) -> None:
        self._workers, self._share, self._id = workers, share, instance_id

    async def steer(self, message: str) -> str:
        acted = await self._workers.act(self._share, "instance", self._id, "steer", message)
        return acted.how if acted is not None else "not running"

    async def stop(self, reason: str) -> None:
        await self._workers.act(self._share, "instance", self._id, "stop", reason)


# ---------------------------------------------------------------- in the worker


def serve_dashboard_ops(link: Link, dispatcher: Dispatcher, share: int) -> None:
    """In a worker process: answer the dashboard's ops with this process's dispatcher."""
    runtime = dispatcher.runtime
    home = runtime.home

    async def bot_settings(name: str, settings: BotSettings) -> None:
        home.replace_bot_settings(name, settings)  # AtlasError naming the bots if none

    async def conversation_modes() -> list[tuple[str, int, str]]:
        states = runtime.conversation_states()
        return [(bot, cid, state.mode) for (bot, cid), state in states.items() if state.mode]

    async def set_conversation_mode(bot: str, conversation_id: int, mode: str) -> str | None:
        state = runtime.conversation_states().get((bot, conversation_id))
        if state is None:
            return None
        previous, state.mode = state.mode, mode or None
        return previous or ""

    def services() -> Any:
        from atlas.agents.services import HomeServices

        found = dispatcher.services
        return found if isinstance(found, HomeServices) else None

    async def workbench_list() -> tuple[list[Instance], list[SubagentView]]:
        here = services()
        if here is None:
            return [], []
        instances = [dataclasses.replace(i, control=None) for i in here.workbench.list()]
        subagents = [
            SubagentView(
                s.id,
                s.status,
                s.bot,
                s.parent_conversation_id,
                s.rounds,
                s.goal,
                AskedView(s.question.text) if s.question is not None else None,
                share,
            )
            for s in here.subagents.running()
        ]
        return instances, subagents

    async def workbench_act(kind: str, item_id: str, action: str, message: str) -> Acted | None:
        here = services()
        if here is None:
            return None
        if kind == "subagent":
            sub = here.subagents.get(item_id)
            if sub is None:
                return None
            if action == "steer":
                here.subagents.steer(sub, message)
            else:
                here.subagents.stop(sub, message)
            return Acted("done", sub.bot, f"{action} subagent {sub.id}")
        instance = here.workbench.get(item_id)
        if instance is None or instance.ended or instance.control is None:
            return None
        if action == "steer":
            how = await instance.control.steer(message)
        else:
            await instance.control.stop(message)
            how = "stopped"
        summary = f"{action} {instance.id} ({instance.account}, {instance.folder})"
        return Acted(how, instance.bot or "", summary)

    link.on(BOT_SETTINGS, bot_settings)
    link.on(CONVERSATION_MODES, conversation_modes)
    link.on(SET_CONVERSATION_MODE, set_conversation_mode)
    link.on(WORKBENCH_LIST, workbench_list)
    link.on(WORKBENCH_ACT, workbench_act)


# ---------------------------------------------------------------- in the home's process


class Workers:
    """The worker processes as the dashboard reaches them (over Elsewhere's links)."""

    def __init__(self, call: Any, shares: list[int]) -> None:
        self._call = call  # Elsewhere.call: (share, op, *args)
        self.shares = shares

    @classmethod
    def of(cls, dispatcher: Dispatcher | None) -> Workers | None:
        from atlas.workers.routing import Elsewhere

        elsewhere = getattr(dispatcher, "elsewhere", None)  # None: one process, or no daemon
        if not isinstance(elsewhere, Elsewhere):
            return None
        here = elsewhere.here
        return cls(elsewhere.call, [s for s in range(elsewhere.placement.count) if s != here])

    async def _one(self, share: int, op: str, *args: Any) -> Any:
        """The op's answer; None from a worker that is down or being restarted (a request
        would wait for it up to a minute): a page does not wait, and the restarted worker
        reads the bot's settings from its files."""
        try:
            return await asyncio.wait_for(self._call(share, op, *args), QUICK_OP_WAIT)
        except (LinkClosed, RemoteError, TimeoutError) as exc:
            log.warning("worker %d: %s failed: %r", share, op, exc)
            return None

    async def bot_settings(self, name: str, settings: BotSettings) -> None:
        for share in self.shares:
            await self._one(share, BOT_SETTINGS, name, settings)

    async def conversation_modes(self) -> list[tuple[str, int, str]]:
        found: list[tuple[str, int, str]] = []
        for share in self.shares:
            found.extend(await self._one(share, CONVERSATION_MODES) or [])
        return found

    async def set_conversation_mode(self, bot: str, conversation_id: int, mode: str) -> str | None:
        """The mode it had ("" for the bot's), from the worker that holds it; None: none does."""
        for share in self.shares:
            previous = await self._one(share, SET_CONVERSATION_MODE, bot, conversation_id, mode)
            if previous is not None:
                return str(previous)
        return None

    async def workbench(self) -> tuple[list[Instance], list[SubagentView]]:
        instances: list[Instance] = []
        subagents: list[SubagentView] = []
        for share in self.shares:
            listed = await self._one(share, WORKBENCH_LIST)
            if listed is None:
                continue
            theirs, subs = listed
            instances.extend(
                dataclasses.replace(i, control=RemoteControl(self, share, i.id))
                if not i.ended
                else i
                for i in theirs
            )
            subagents.extend(subs)
        return instances, subagents

    async def act(
        self, share: int | None, kind: str, item_id: str, action: str, message: str
    ) -> Acted | None:
        """Steer or stop an instance or subagent in `share` (None: whichever has it)."""
        for each in [share] if share is not None else self.shares:
            try:
                acted = await self._call(each, WORKBENCH_ACT, kind, item_id, action, message)
            except LinkClosed:
                continue
            except RemoteError as exc:  # ended meanwhile, a harness that refuses
                raise AtlasError(str(exc)) from None
            if acted is not None:
                return acted  # type: ignore[no-any-return]
        return None


__all__ = ["SubagentView", "Workers", "serve_dashboard_ops"]
