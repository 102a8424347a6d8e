"""An executor task's data: where it came from, what it did, how its end is told
(atlas/executors/tasks.py drives it)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from atlas.executors.base import (
    Account,
    Executor,
    ExecutorInstance,
    LimitReached,
    Result,
    ToolUse,
)

if TYPE_CHECKING:
    from atlas.home import Home
    from atlas.tools.registry import Asker, Notifier, QuestionAsker, RunContext

TRANSCRIPT_KEPT = 200
NO_ANSWER = "The person could not be asked or did not answer ({why}); decide by yourself and say what you chose."
CONTINUE = (
    "[Your session was moved to another account after the previous one reached its plan's "
    "limit.] Go on with the task from where you stopped."
)


class TurnRecord(Protocol):
    """The delegation record's API (atlas/executors/record.py, DelegationRecord)."""

    async def start_turn(
        self,
        instance_id: str,
        executor: str,
        account: str,
        folder: str,
        prompt: str,
        conversation: str | None,
    ) -> Any: ...
    async def add(self, turn_id: Any, kind: str, text: str, who: str | None = None) -> None: ...
    async def finish_turn(
        self,
        turn_id: Any,
        final_text: str,
        files_changed: str,
        usage: dict[str, Any] | None,
        state: str,
    ) -> None: ...


@dataclass
class Origin:
    """Where a task came from and how it reaches the person: taken from the delegate call's run
    (the channel's ask and questions, the conversation's notices)."""

    bot: str
    conversation_id: int
    run_kind: str
    ask: Asker | None = None
    ask_questions: QuestionAsker | None = None
    notify: Notifier | None = None

    @classmethod
    def of(cls, run: RunContext) -> Origin:
        return cls(
            run.bot.name,
            run.conversation_id,
            run.run_kind,
            run.ask,
            run.ask_questions,
            run.notify,
        )


@dataclass
class Task:
    id: str
    goal: str
    folder: Path
    origin: Origin
    route: list[str] | None
    executor: Executor
    account: Account
    instance: ExecutorInstance | None = None
    session_id: str | None = None
    tried: list[str] = field(default_factory=list)  # accounts used, in order (target names)
    hops: list[str] = field(default_factory=list)  # how it moved at limits, for the notice
    done: list[str] = field(default_factory=list)  # what it did: its tool calls, short
    messages: deque[str] = field(default_factory=lambda: deque(maxlen=TRANSCRIPT_KEPT))
    open_questions: list[str] = field(default_factory=list)
    result: Result | None = None
    failure: str | None = None
    limit: LimitReached | None = None
    stop_reason: str | None = None
    driver: asyncio.Task[None] | None = None
    turn: Any = None  # the delegation record's current turn
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    report: str = ""
    allowed_hosts: set[str] = field(default_factory=set)  # hosts the person let it reach


def short(value: object, width: int = 160) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tool_line(event: ToolUse) -> str:
    data = dict(event.input)
    shown = data.get("command") or data.get("file_path") or data.get("changes") or data
    return f"{event.tool}: {short(shown)}"


def detail(task: Task, state: str) -> str:
    """How a task ended, in a line."""
    if state == "done" and task.result is not None:
        return "finished"
    if state == "stopped":
        return f"stopped: {task.stop_reason}"
    if state == "limit" and task.limit is not None:
        resets = task.limit.resets_at
        when = f", resets {resets.isoformat(timespec='minutes')}" if resets else ""
        return f"at its plan's limit with no route left{when}: {task.limit.message}"
    if task.failure:
        return f"failed: {task.failure}"
    return f"failed: {task.result.text if task.result else 'no result'}"


def report(home: Home, task: Task, state: str, detail: str) -> str:
    """The notice of a task's end (or a waiting call's result)."""
    from atlas.agent.spill import spill

    lines = [f"Executor task {task.id} ({task.account.target}, {task.folder}) {state}."]
    lines += [f"It moved: {hop}" for hop in task.hops]
    if state != "done":
        lines.append(detail)
    result = task.result
    if result is not None and result.text:
        budget = home.settings.agents.summary_chars
        path = home.spill_dir / task.origin.bot / "executors" / f"{task.id}.md"
        try:
            text = spill(result.text, budget, path)
        except OSError:
            text = result.text[:budget]
        lines.append(f"Its final answer:\n{text}")
    if result is not None and result.cost_usd is not None:
        lines.append(f"Cost: ${result.cost_usd:.4f}")
    if state != "done" or task.session_id:
        lines.append(
            f"To go on: delegate action=resume, subagent_id={task.id}, message=…"
            + (" (executor=… to go on elsewhere)" if state == "limit" else "")
        )
    return "\n".join(lines)
