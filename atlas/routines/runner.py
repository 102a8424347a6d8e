"""One run of a routine: a detached turn, its answer delivered (or not), the run recorded."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Protocol

from atlas.channels.base import Address
from atlas.routines.store import SENDING, Routine, RoutineStore, RunResult

if TYPE_CHECKING:
    from atlas.dispatch import Detached
    from atlas.tools.registry import Notifier, RunKind

log = logging.getLogger(__name__)

SILENT = "[SILENT]"
TIME_LIMIT_PREFIX = "stopped after its time limit"  # how Dispatcher.run_detached says it


class RunsDetached(Protocol):
    """What a routine needs from the dispatcher."""

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

    async def deliver(self, address: Address, text: str) -> str | None: ...


def run_prompt(routine: Routine, due: datetime | None, tz: tzinfo) -> str:
    """The routine's prompt, framed so the model knows nobody is watching and how to stay quiet."""
    when = (due or datetime.now(tz)).astimezone(tz).isoformat(timespec="minutes")
    return (
        f'[Scheduled run of the routine "{routine.name}" ({routine.schedule}), due {when}. '
        "Nobody is watching and nobody can answer questions: do the task below on your own. "
        "Your final answer is sent to the user as it is. When there is nothing worth telling "
        f"them, answer exactly {SILENT}]\n\n{routine.prompt}"
    )


def chat_key(routine: Routine, run_id: int) -> str:
    """The run's own conversation (channel `routine`)."""
    return f"routine:{routine.name}:{run_id}"


async def execute_run(
    routine: Routine,
    run_id: int,
    due: datetime | None,
    *,
    dispatcher: RunsDetached,
    store: RoutineStore,
    time_limit: float,
    tz: tzinfo,
) -> RunResult:
    """Run the turn, record how it went, deliver what it says, record that. Never raises but
    for cancellation (which is recorded first). The outcome is recorded before it is sent, as
    `sending`: a crash while sending leaves a run the next start can tell apart from one cut
    short mid-turn (it may have arrived, so it is not sent again; see `caught_sending`)."""
    try:
        result, message = await _outcome(routine, run_id, due, dispatcher, time_limit, tz)
    except asyncio.CancelledError:
        result = RunResult("failed", error="stopped: Atlas shut down during the run")
        await store.finish_run(run_id, result)
        raise
    except Exception as exc:  # a bug in a run must not stop the scheduler: record it
        log.exception("routine %s (run %d) crashed", routine.name, run_id)
        result = RunResult("failed", error=f"{type(exc).__name__}: {exc}")
        message = f'Routine "{routine.name}" failed: {result.error}'
    if message is not None and routine.address() is not None:
        result.delivery = SENDING
    await store.finish_run(run_id, result)
    if message is not None:
        result.delivery, result.owed = await deliver_to_target(routine, dispatcher, message)
        await store.record_delivery(run_id, result.delivery, result.owed)
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
    detached = await dispatcher.run_detached(
        routine.bot,
        run_prompt(routine, due, tz),
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


async def deliver_to_target(
    routine: Routine, dispatcher: RunsDetached, text: str
) -> tuple[str, str | None]:
    """What the run's record says of the delivery, and the message when it did not arrive
    (owed: the next start sends it, or the channel with the next message to that address)."""
    address = routine.address()
    if address is None:
        return "no target (kept in the history only)", None
    problem = await dispatcher.deliver(address, text)
    if problem:
        return f"not delivered to {routine.target}: {problem}", text
    return f"delivered to {routine.target}", None
