"""One run of a routine: a detached turn, its answer delivered (or not), the run recorded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Protocol

from atlas.outbox.notes import REPORT_KEY
from atlas.routines.precheck import OUTPUT_KEPT, CallsTools, prompt_with_output, run_precheck
from atlas.routines.store import Routine, RunResult, Target

if TYPE_CHECKING:
    from atlas.dispatch import Detached
    from atlas.outbox.rows import Kind
    from atlas.outbox.sender import Delivery, Outbox
    from atlas.routines.engine import RoutineEngine
    from atlas.tools.registry import Notifier, RunKind

log = logging.getLogger(__name__)

SILENT = "[SILENT]"
SHUT_DOWN = "stopped: Atlas shut down during the run"  # a cancelled run's error by default
TIME_LIMIT_PREFIX = "stopped after its time limit"  # how Dispatcher.run_detached says it


class RunsDetached(CallsTools, Protocol):
    """What a routine needs from the dispatcher: runs, its pre-check's tool call, and the
    outbox its reports go through."""

    outbox: Outbox

    async def run_detached(
        self,
        bot_name: str,
        prompt: str,
        *,
        run_kind: RunKind,
        chat: str,
        notify: Notifier | None = None,
        time_limit: float | None = None,
    ) -> Detached: ...


def run_prompt(routine: Routine, due: datetime | None, tz: tzinfo) -> str:
    """The routine's prompt, framed so the model knows nobody is watching and how to stay quiet."""
    when = (due or datetime.now(tz)).astimezone(tz).isoformat(timespec="minutes")
    return (
        f'[Scheduled run of the routine "{routine.name}" ({routine.schedule}), due {when}. '
        "Nobody is watching and nobody can answer questions: do the task below on your own. "
        "Your final answer is sent to the user as it is. When there is nothing worth telling "
        f"them, answer exactly {SILENT}]\n\n{routine.prompt}"
    )


def report_key(routine: Routine, run_id: int) -> str:
    """The outbox key of what a run's target is told (its report, or that it was cut short):
    one message per run, however many starts try to tell it. It names the routine, for the
    note a report caught while sending is followed by (atlas/outbox/notes.py)."""
    return f"{REPORT_KEY}{run_id}:{routine.name}"


def chat_key(routine: Routine, run_id: int) -> str:
    """The run's own conversation (channel `routine`)."""
    return f"routine:{routine.name}:{run_id}"


async def execute_run(
    routine: Routine,
    run_id: int,
    due: datetime | None,
    *,
    dispatcher: RunsDetached,
    store: RoutineEngine,
    time_limit: float,
    tz: tzinfo,
    why_cancelled: Callable[[], str | None] | None = None,
) -> RunResult:
    """Run the turn, record how it went, deliver what it says, record that. Never raises but
    for cancellation (which is recorded first: `why_cancelled()` when it says, else that Atlas
    shut down). The report is an outbox row (keyed by the run)
    before the run's outcome is recorded: a crash from there on leaves it to the outbox's
    resume (sent once, or, caught while sending, its target told once), never lost."""
    try:
        result, message = await _outcome(routine, run_id, due, dispatcher, time_limit, tz)
    except asyncio.CancelledError:
        why = why_cancelled() if why_cancelled is not None else None
        result = RunResult("failed", error=why or SHUT_DOWN)
        await store.finish_run(run_id, result)
        raise
    except Exception as exc:  # a bug in a run must not stop the scheduler: record it
        log.exception("routine %s (run %d) crashed", routine.name, run_id)
        result = RunResult("failed", error=f"{type(exc).__name__}: {exc}")
        message = f'Routine "{routine.name}" failed: {result.error}'
    address = routine.address()
    row_id = None
    if message is not None and address is not None:
        row_id = await dispatcher.outbox.enqueue(
            address, message, kind="report", key=report_key(routine, run_id)
        )
        result.delivery = f"queued for {routine.target}"
    elif message is not None:
        result.delivery = NO_TARGET
    await store.finish_run(run_id, result)
    if row_id is not None and address is not None:
        sent = await dispatcher.outbox.wait(address, row_id)
        result.delivery = describe(sent, routine.target)
        await store.record_delivery(run_id, result.delivery)
    log.info("routine %s run %d: %s (%s)", routine.name, run_id, result.status, result.delivery)
    return result


async def _outcome(
    routine: Routine,
    run_id: int,
    due: datetime | None,
    dispatcher: RunsDetached,
    time_limit: float,
    tz: tzinfo,
) -> tuple[RunResult, str | None]:
    """How the run ended, and the message for its target (None: `[SILENT]`)."""
    prompt = run_prompt(routine, due, tz)
    if routine.precheck:
        check = await run_precheck(dispatcher, routine, chat_key(routine, run_id))
        if check.verdict == "quiet":
            skipped = RunResult("skipped", text=check.output[:OUTPUT_KEPT], delivery="skipped")
            return skipped, None
        if check.verdict == "failed":
            error = f"pre-check `{routine.precheck}` failed: {check.why}"
            tail = f"\n{check.output[-OUTPUT_KEPT:]}" if check.output else ""
            return RunResult("failed", error=error + tail), f'Routine "{routine.name}" {error}'
        prompt = prompt_with_output(prompt, check, routine.precheck)
    detached = await dispatcher.run_detached(
        routine.bot,
        prompt,
        run_kind="routine",
        chat=chat_key(routine, run_id),
        time_limit=time_limit,
    )
    if detached.outcome is None:
        error = detached.error or "the run ended without an answer"
        timed_out = error.startswith(TIME_LIMIT_PREFIX)
        message = f'Routine "{routine.name}" ' + (
            f"was stopped: it ran past its time limit of {time_limit:g} s."
            if timed_out
            else f"failed: {error}"
        )
        failed = RunResult(
            "timeout" if timed_out else "failed",
            error=error,
            conversation_id=detached.conversation_id,
        )
        return failed, message
    outcome = detached.outcome
    result = RunResult(
        "ok",
        text=outcome.text,
        input_tokens=outcome.usage.input_tokens,
        output_tokens=outcome.usage.output_tokens,
        conversation_id=detached.conversation_id,
    )
    if outcome.text.strip() == SILENT:
        result.status, result.delivery = "silent", "silent"
        return result, None
    notes = "".join(f"({note})\n" for note in outcome.notes)
    return result, notes + outcome.text


NO_TARGET = "no target (kept in the history only)"


def describe(sent: Delivery, target: Target | None) -> str:
    """A run's delivery as its record says it."""
    if sent.state == "delivered":
        return f"delivered to {target}"
    if sent.state == "kept":
        return f"not delivered to {target}: {sent.error} (kept: the outbox sends it when it can)"
    if sent.state == "maybe":
        return f"may not have reached {target} (not sent again; its target is told)"
    return f"not delivered to {target}: {sent.error or sent.state}"


async def deliver_to_target(
    routine: Routine, dispatcher: RunsDetached, text: str, *, run_id: int, kind: Kind = "report"
) -> str:
    """Tell the routine's target `text` through the outbox, once per run (`report_key`): a
    row made for the run before (its report, or this notice by a start that died) is the one
    awaited. What the run's record says of it."""
    address = routine.address()
    if address is None:
        return NO_TARGET
    sent = await dispatcher.outbox.send(address, text, kind=kind, key=report_key(routine, run_id))
    return describe(sent, routine.target)
