"""The workbench: every live executor instance of the home, Atlas's and the person's own.

Atlas's instances are the tasks `delegate` hands to an executor (atlas/executors/tasks.py);
the person's own are the sessions they start themselves, which the Claude Code plugin reports
(atlas/executors/bridge.py). `delegate action=list` shows them all; `steer` and `stop` take an
instance's id, and on the person's own the person approves each time (the gate's
`workbench:` rule, atlas/tools/delegate.py).

    workbench.add(Instance(...)); workbench.update(id, state="done"); workbench.get(id)

In memory, as the process sees it; Atlas's own tasks are also rows in atlas.db
(atlas/executors/task_rows.py), from which a restart fills the workbench back, and the record of
every instance's turns is the delegation record's (atlas/executors/record.py).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from atlas.executors.model import ExecutorError

if TYPE_CHECKING:
    from atlas.channels.base import Address

Owner = Literal["atlas", "person"]
# running, asking (waits for the person), done, failed, stopped, limit (at its plan's limit),
# interrupted (Atlas stopped or was killed while it ran: atlas/executors/task_rows.py)
INTERRUPTED = "interrupted"
ENDED_STATES = ("done", "failed", "stopped", "limit", INTERRUPTED)
KEPT_ENDED = 50  # ended instances kept for `list`, newest first; older ones are dropped


class InstanceControl(Protocol):
    """How to act on a live instance: Atlas's own task, or (through the plugin) a person's."""

    async def steer(self, message: str) -> str:
        """Deliver a message; says how (`sent into the running turn`, `queued`...)."""
        ...

    async def stop(self, reason: str) -> None: ...


@dataclass
class Instance:
    id: str
    executor: str  # `claude-code`
    account: str  # the target name: `claude-code@work`
    folder: Path
    state: str = "running"
    owner: Owner = "atlas"
    session_id: str | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    title: str = ""  # the task's first line, or the session's name
    origin: Address | None = None  # the conversation that started it (Atlas's), else None
    bot: str | None = None  # the bot and conversation that started it: "yours" in list
    conversation_id: int | None = None
    detail: str = ""  # what it waits on, or how it ended
    ended_at: datetime | None = None
    control: InstanceControl | None = field(default=None, repr=False, compare=False)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def new_instance_id() -> str:
    return f"ex-{secrets.token_hex(3)}"


class Workbench:
    """The home's instances by id, in the order they started."""

    def __init__(self) -> None:
        self._instances: dict[str, Instance] = {}

    def add(self, instance: Instance) -> Instance:
        """Put an instance on the workbench (an instance with the same id is replaced)."""
        self._instances[instance.id] = instance
        self._forget_old()
        return instance

    def update(self, instance_id: str, **changes: object) -> Instance:
        """Change an instance's fields; an ended state stamps `ended_at`. Raises ExecutorError
        for an id not on the workbench."""
        current = self.get(instance_id)
        if current is None:
            raise ExecutorError(f"no instance {instance_id!r} on the workbench")
        if changes.get("state") in ENDED_STATES and "ended_at" not in changes:
            changes["ended_at"] = datetime.now(UTC)
        updated = replace(current, **changes)  # type: ignore[arg-type]
        self._instances[instance_id] = updated
        return updated

    def get(self, instance_id: str) -> Instance | None:
        return self._instances.get(instance_id.strip())

    def find_session(self, session_id: str) -> Instance | None:
        """The instance of a harness session (the plugin reports sessions by their id)."""
        return next((i for i in self._instances.values() if i.session_id == session_id), None)

    def list(self) -> list[Instance]:
        """Live instances first, each group oldest first."""
        every = list(self._instances.values())
        return [i for i in every if not i.ended] + [i for i in every if i.ended]

    def remove(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)

    def _forget_old(self) -> None:
        ended = [i for i in self._instances.values() if i.ended]
        for old in ended[: max(0, len(ended) - KEPT_ENDED)]:
            del self._instances[old.id]


def whose(instance: Instance, bot: str, conversation_id: int) -> str:
    """`yours`, `the person's` or `another conversation's`, as `list` says it."""
    if instance.owner == "person":
        return "the person's"
    if instance.bot == bot and instance.conversation_id == conversation_id:
        return "yours"
    return "another conversation's"


def describe(instance: Instance, bot: str, conversation_id: int) -> str:
    """One line of `delegate action=list`."""
    started = instance.started_at.astimezone(UTC).strftime("%H:%M UTC")
    detail = f" — {instance.detail}" if instance.detail else ""
    title = f": {instance.title}" if instance.title else ""
    return (
        f"- {instance.id} ({instance.state}, {whose(instance, bot, conversation_id)}, "
        f"{instance.account}, {instance.folder}, since {started}){title}{detail}"
    )
