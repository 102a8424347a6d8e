"""At start: the executor tasks of the last process, back from their rows (atlas/executors/
task_rows.py).

- A row still `running` or `asking` means the process was killed while the task ran: it is
  `interrupted` now (its harness died with the sandbox that ran it).
- The latest rows go back on the workbench, so `delegate action=list` shows them, and
  `delegate action=resume` goes on with any of them in its recorded session.
- Each interrupted task not reported yet is reported once to the conversation that started it:
  a notice submitted there, as a task's end is (the bot's turn tells the person, and its
  answer goes out through the outbox). A routine's task is not: its run was cut too, and the
  scheduler records that. A conversation whose channel does not run here is left for a later
  start.

    report = await restore_delegations(dispatcher, services.workbench, TaskRows(home_store))
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.errors import AtlasError
from atlas.executors.task_rows import TaskRows, instance_of
from atlas.executors.workbench import KEPT_ENDED, Workbench

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

INTERRUPTED_NOTICE = (
    "Executor task {id} ({account}, {folder}) was interrupted: Atlas stopped while it ran "
    "(its last event: {last_event}). Its task: {title}\n"
    "Tell the person. To go on: delegate action=resume, subagent_id={id}, message=… "
    "(it goes on in its session{session})."
)


@dataclass
class RestoreReport:
    interrupted: list[str] = field(default_factory=list)  # killed while running: marked now
    restored: int = 0  # put back on the workbench
    reported: list[str] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)  # not reported yet, and why

    def summary(self) -> str:
        return (
            f"{self.restored} on the workbench, {len(self.interrupted)} found running, "
            f"{len(self.reported)} reported, {len(self.left)} left to report"
        )


def interrupted_notice(row: dict[str, Any]) -> str:
    session = f" {row['session_id']}" if row.get("session_id") else ""
    return INTERRUPTED_NOTICE.format(
        id=row["id"],
        account=row["account"],
        folder=row["folder"],
        last_event=row.get("last_event") or "started",
        title=row.get("title") or row["goal"][:100],
        session=session,
    )


async def restore_delegations(
    dispatcher: Dispatcher, workbench: Workbench, rows: TaskRows
) -> RestoreReport:
    """Call once at start, after the channels are registered (the reports need them)."""
    report = RestoreReport(interrupted=await rows.interrupt_live())
    for row in reversed(await rows.latest(KEPT_ENDED)):  # oldest first, as they started
        if workbench.get(row["id"]) is None:
            workbench.add(instance_of(row))
            report.restored += 1
    for row in await rows.unreported():
        why = await _report(dispatcher, row)
        if why is None:
            await rows.mark_reported(row["id"])
            report.reported.append(row["id"])
        else:
            report.left.append((row["id"], why))
            log.warning("executor task %s: its interruption not reported yet: %s", row["id"], why)
    return report


async def restore_executor_tasks(dispatcher: Dispatcher) -> str:
    """The daemon's call at start (after the channels and recovery): the summary for its log.
    A failure is logged and the start goes on: the bots answer without their old tasks."""
    from atlas.services import home_services

    workbench = home_services(dispatcher).workbench
    try:
        report = await restore_delegations(
            dispatcher, workbench, TaskRows(dispatcher.runtime.engines.records)
        )
    except (AtlasError, sqlite3.Error) as exc:
        log.exception("executor tasks of the last process could not be restored")
        return f"not restored: {exc}"
    return report.summary()


async def _report(dispatcher: Dispatcher, row: dict[str, Any]) -> str | None:
    """Submit the notice into the task's conversation; None when done (or not to be told),
    else why not."""
    from atlas.dispatch import Inbound

    if row.get("run_kind") == "routine":
        return None  # the routine's run waited for it and was cut with it: nobody to tell
    runtime = dispatcher.runtime
    try:
        bot = runtime.home.bot(row["bot"])
    except AtlasError as exc:
        return f"its bot is gone: {exc}"
    store = await runtime.store(bot)
    conversation = await store.get_conversation(int(row["conversation_id"]))
    if conversation is None:
        return f"its conversation {row['conversation_id']} is gone"
    address = Address(
        bot.name, conversation.channel, conversation.chat, conversation.thread, conversation.user
    )
    if address.channel not in dispatcher.channels:
        return f"channel {address.channel} is not running"
    notice = Inbound(address, interrupted_notice(row), kind="notice", run_kind="conversation")
    if not await dispatcher.submit(notice):  # a spread bot's: to the worker that serves it
        return "the conversation did not take the notice"
    return None
