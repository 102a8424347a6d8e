"""delegate: hand tasks to subagents that work in the background (atlas/agents/subagents.py,
reached through run.services)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas.errors import ToolError
from atlas.tools import delegate_executors as on_executors
from atlas.tools.registry import RunContext, Tool, tool
from atlas.tools.services import NEEDS_DISPATCHER, Subagents

MAX_TASKS = 10


class SubagentTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=4000)
    context: str = Field("", max_length=20_000, description="all it needs to know")
    folder: str | None = Field(None, description="with executor: where it works")


def not_for_subagents(run: RunContext) -> str | None:
    """Availability rule of the tools a subagent must not have."""
    return "not available to subagents" if run.run_kind == "subagent" else None


def _waits(run: RunContext) -> bool:
    """A routine (or a run with nowhere to send a notice) waits for its subagents."""
    return run.run_kind == "routine" or run.notify is None


def _manager(run: RunContext) -> Subagents[Any, Any]:
    if run.services is None:
        raise ToolError(NEEDS_DISPATCHER)
    return run.services.subagents


def _elapsed(row: dict[str, Any]) -> str:
    start = row.get("started_at")
    if not start:
        return ""
    end = datetime.fromisoformat(row["ended_at"]) if row.get("ended_at") else datetime.now(UTC)
    return f", {(end - datetime.fromisoformat(start)).total_seconds():.0f} s"


async def _spawn(run: RunContext, tasks: list[SubagentTask] | None) -> str:
    if not tasks:
        raise ToolError("spawn needs `tasks`: a list of {goal, context}")
    manager = _manager(run)
    batch = await manager.spawn(run, [(t.goal, t.context) for t in tasks])
    ids = "\n".join(f"- {s.id}: {s.goal.strip().splitlines()[0][:100]}" for s in batch.subagents)
    if _waits(run):
        await manager.wait(batch)
        return batch.report()
    manager.notify_when_done(batch, run.notify)  # type: ignore[arg-type]
    at_once = run.settings.agents.subagents_at_once
    return (
        f"Started {len(batch.subagents)} subagent(s) in {batch.id} (up to {at_once} run at "
        f"once):\n{ids}\nTheir results come back together as one notice when the last one "
        "ends. Carry on meanwhile; do not wait or poll."
    )


async def _list(run: RunContext) -> str:
    rows = await _manager(run).listing(run)
    bench = on_executors.workbench_lines(run)
    if bench:
        listed = await _list_subagents(rows) if rows else "No subagents in this conversation."
        return f"{listed}\n\nThe workbench (executor instances):\n" + "\n".join(bench)
    return await _list_subagents(rows)


async def _list_subagents(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No subagents in this conversation."
    lines = [
        f"- {r['id']} ({r['status']}{_elapsed(r)}, "
        f"{(r.get('input_tokens') or 0) + (r.get('output_tokens') or 0):,} tokens): "
        f"{str(r['goal']).strip().splitlines()[0][:100]}"
        + (f" — {r['reason']}" if r.get("reason") else "")
        for r in rows
    ]
    return "\n".join(lines)


async def _find(run: RunContext, subagent_id: str | None):  # type: ignore[no-untyped-def]
    if not subagent_id:
        raise ToolError("give `subagent_id` (see action=list)")
    manager = _manager(run)
    sub = manager.find(run, subagent_id)
    if sub is None:
        row = await manager.delegation(subagent_id.strip())
        mine = row and row["bot"] == run.bot.name
        if mine and row["parent_conversation_id"] == run.conversation_id:
            raise ToolError(f"subagent {row['id']} has already ended ({row['status']})")
        raise ToolError(f"no subagent {subagent_id!r} in this conversation (see action=list)")
    if sub.status in ("done", "failed", "stopped"):
        raise ToolError(f"subagent {sub.id} has already ended ({sub.status})")
    return manager, sub


# What only an executor gives delegate: not shown to a run that has none (accepted all the
# same, answered with why it cannot be done).
EXECUTOR_ONLY = frozenset(
    {"executor", "route", "account", "tasks.folder", "action=resume", "action=account"}
)


def _executor_only_unless_one(run: RunContext) -> frozenset[str]:
    return EXECUTOR_ONLY if on_executors.no_executor(run) else frozenset()


@tool(
    available=not_for_subagents,
    describe=lambda run: on_executors.describe_delegate(run, delegate.description),
    withheld=_executor_only_unless_one,
)
async def delegate(
    run: RunContext,
    tasks: Annotated[list[SubagentTask] | None, Field(max_length=MAX_TASKS)] = None,
    action: Literal["spawn", "list", "steer", "stop", "answer", "resume", "account"] = "spawn",
    subagent_id: str | None = None,
    message: Annotated[str | None, Field(max_length=4000)] = None,
    executor: str | None = None,
    route: list[str] | None = None,
    account: str | None = None,
) -> str:
    """Hand independent tasks (up to 10) to subagents working in parallel in the background
    with your tools (no memory, no questions to the user). A subagent knows nothing of this
    conversation: give each task a goal and all the context it needs. In a chat this returns
    at once and all results arrive together as one notice; in a routine it waits for them.
    action list: your subagents; steer: send subagent_id a message; stop: end subagent_id
    (message: why); answer: message answers subagent_id's question (it asks in a notice)."""
    if (executor or route or action in ("resume", "account")) and on_executors.no_executor(run):
        raise ToolError(on_executors.NO_EXECUTOR)
    if action == "spawn":
        parsed = [SubagentTask.model_validate(t) for t in tasks] if tasks else None
        if executor:
            if not parsed:
                raise ToolError("spawn needs `tasks`: a list of {goal, context, folder}")
            return await on_executors.spawn(run, executor, parsed, route, _waits(run))
        return await _spawn(run, parsed)
    if action == "list":
        return await _list(run)
    if action == "resume":
        return await on_executors.resume(run, subagent_id, message, executor, route, _waits(run))
    if action == "account":
        return await on_executors.login(run, executor, account)
    if action in ("steer", "stop") and subagent_id:
        acted = await on_executors.act(run, action, subagent_id.strip(), message)
        if acted is not None:
            return acted
    manager, sub = await _find(run, subagent_id)
    if action == "answer":
        if not message or not message.strip():
            raise ToolError("answer needs a `message`: your answer to the subagent's question")
        question = manager.answer(sub, message.strip())
        return f"Answered {sub.id}'s question {question}; it goes on with your answer now."
    if action == "steer":
        if not message or not message.strip():
            raise ToolError("steer needs a `message` for the subagent")
        manager.steer(sub, message.strip())
        return f"Sent to {sub.id}; it goes on with your message now."
    manager.stop(sub, f"stopped by the agent that started it: {message or 'no reason given'}")
    return f"Stopping {sub.id}; its batch's report will say it was stopped."


DELEGATE_TOOLS: list[Tool] = [delegate]
