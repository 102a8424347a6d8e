"""executor_accounts: the outside executors' accounts, read from the harnesses with no model
call (docs/executors.md, Accounts)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import Field

from atlas.errors import ToolError
from atlas.executors.accounts import describe
from atlas.executors.base import ExecutorError
from atlas.executors.registry import ExecutorSet, executor_classes
from atlas.tools.registry import RunContext, only_for, tool

_WHERE_DELEGATE_IS = only_for("conversation", "bot", "routine")


def with_an_executor(run: RunContext) -> str | None:
    """Where delegate is, once config.toml turns on an installed executor (executor_accounts)."""
    reason = _WHERE_DELEGATE_IS(run)
    if reason is not None:
        return reason
    installed = executor_classes()
    if any(s.enabled and n in installed for n, s in run.home.settings.executors.items()):
        return None
    return (
        "not available: no executor is turned on (`enabled = true` under "
        "[executors.claude-code] or [executors.codex] in config.toml)"
    )


def _report(executors: ExecutorSet, only: str | None) -> str:
    names = [only] if only else executors.names()
    parts = []
    for name in names:
        executor = executors.get(name)
        statuses = executors.statuses(name)
        order = executor.settings.hand_over or [s.target for s in statuses]
        lines = [describe(status) for status in statuses]
        lines.append(f"{name}: accounts take over at a limit in this order: {', '.join(order)}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


@tool(deferred=True, read_only=True, available=with_an_executor)
async def executor_accounts(
    run: RunContext,
    executor: Annotated[str | None, Field(description="only this one: claude-code, codex")] = None,
) -> str:
    """The outside executors' accounts, before picking one for delegate: each one's target name,
    who it is logged in as, its plan usage per limit window and when each resets, whether it is
    at its limit and bills past it, the folders that start on it, and the order in which
    accounts take over at a limit. Read from the harnesses' files, no model call; "unknown"
    where they do not say."""
    executors = ExecutorSet.for_home(run.home)
    try:
        return await asyncio.to_thread(_report, executors, executor)
    except ExecutorError as exc:
        raise ToolError(str(exc)) from exc


EXECUTOR_TOOLS = [executor_accounts]
