"""cronjob_manage: a bot's routines (prompts run on a schedule), made and managed from a chat."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Literal
from zoneinfo import ZoneInfo

from pydantic import Field

from atlas.config import NAME_PATTERN
from atlas.errors import ConfigError, NotOnPostgres, ToolError
from atlas.routines.schedule import (
    ScheduleError,
    next_fire_times,
    parse_duration,
    parse_schedule,
    pin,
)
from atlas.routines.store import Routine, RoutineError, RoutineStore, Target
from atlas.routines.targets import resolve_channel
from atlas.store.home_db import HomeStore
from atlas.tools.registry import RunContext, only_for, tool
from atlas.tools.services import Routines
from atlas.trust.threats import scan

Action = Literal["create", "list", "update", "pause", "resume", "remove", "run"]
NOT_RUNNING = (
    " Routines run inside the daemon (`atlas run`), which is not running here: "
    "it starts on schedule once the daemon runs."
)


def _scheduler(run: RunContext) -> Routines | None:
    """The daemon's running scheduler, handed in through the run's services."""
    return run.services.routines if run.services is not None else None


@contextlib.asynccontextmanager
async def _routine_store(run: RunContext) -> AsyncIterator[RoutineStore]:
    """The running scheduler's store, else the process's atlas.db (a worker's reaches the
    home's process), else (no services: a test, a direct call) the file opened for this call."""
    scheduler = _scheduler(run)
    if scheduler is not None:
        yield scheduler.store
        return
    if run.services is not None:
        yield run.services.engines.routines  # type: ignore[misc]  # atlas.db's, or PostgreSQL's
        return
    if run.home.settings.store.url is not None:  # never the SQLite file of a PostgreSQL home
        raise NotOnPostgres("cronjob_manage without a running home", run.home.settings.store.url)
    home_store = HomeStore(run.home.db_path)
    try:
        yield RoutineStore(home_store)
    finally:
        await home_store.close()


@tool(deferred=True, available=only_for("conversation", "bot"))
async def cronjob_manage(
    run: RunContext,
    action: Action,
    job_id: Annotated[str | None, Field(description="the routine's id or name")] = None,
    name: str | None = None,
    prompt: Annotated[str | None, Field(description="complete on its own")] = None,
    schedule: Annotated[
        str | None,
        Field(
            description="every 30m | in 2h | every day at 18:30 | weekdays at 9am | "
            "every mon,fri at 7:15pm | every month on the 1st at 8:00 | cron | ISO date-time"
        ),
    ] = None,
    channel: Annotated[str | None, Field(description="default: this conversation's")] = None,
    chat: str | None = None,
    thread: str | None = None,
    grace: Annotated[str | None, Field(description="how late a missed run may start: 2h")] = None,
    precheck: Annotated[
        str | None,
        Field(description="command run first: exit 0 runs the prompt, 1 skips (no model call)"),
    ] = None,
) -> str:
    """Routines: prompts this bot runs on a schedule (the user's time zone). Each run is a new
    conversation that knows nothing of this one, so the prompt must stand alone: say what to do,
    for whom, and what to report. The run's answer is sent to the chat (default: this one); an
    answer of exactly [SILENT] sends nothing. action: create (name, prompt, schedule), list,
    update, pause, resume, remove, run (now); job_id: id or name."""
    try:
        return await _manage(run, action, job_id, name, prompt, schedule, channel, chat, thread,
                             grace, precheck)  # fmt: skip
    except RoutineError as exc:  # a name taken, a routine gone meanwhile: the model reads why
        raise ToolError(str(exc)) from None


async def _manage(
    run: RunContext,
    action: Action,
    job_id: str | None,
    name: str | None,
    prompt: str | None,
    schedule: str | None,
    channel: str | None,
    chat: str | None,
    thread: str | None,
    grace: str | None,
    precheck: str | None,
) -> str:
    scheduler = _scheduler(run)
    async with _routine_store(run) as store:
        if action == "list":
            return await _list(run, store, scheduler)
        if action == "create":
            return await _create(run, store, scheduler, name, prompt, schedule, grace,
                                 channel, chat, thread, precheck)  # fmt: skip
        routine = await _find(run, store, job_id)
        if action == "update":
            changes = await _changes(
                run, name, prompt, schedule, grace, channel, chat, thread, precheck
            )
            routine = await store.update(routine.id, **changes)
            note = await _synced(scheduler)
            return f"Updated {await _describe(run, routine, scheduler)}{note}"
        if action in ("pause", "resume"):
            routine = await store.update(routine.id, paused=action == "pause")
            note = await _synced(scheduler)
            return f"{action.title()}d {await _describe(run, routine, scheduler)}{note}"
        if action == "remove":
            await store.remove(routine.id)
            note = await _synced(scheduler)
            return f"Removed routine {routine.name} (id {routine.id}).{note}"
        if scheduler is None:
            raise ToolError("routines run only inside the daemon (`atlas run`), not running here")
        run_id = await scheduler.run_now(routine)
        where = routine.target or "nowhere (history only)"
        return f"Started run {run_id} of {routine.name}; its answer goes to {where}."


async def _synced(scheduler: Routines | None) -> str:
    """Catch the scheduler up with atlas.db now (the next run then named is its job's); the
    note to add when no scheduler runs here."""
    if scheduler is None:
        return NOT_RUNNING
    await scheduler.sync()
    return ""


async def _find(run: RunContext, store: RoutineStore, job_id: str | None) -> Routine:
    if not job_id:
        raise ToolError("give job_id: the routine's id or name (action=list shows them)")
    routine = await store.find(run.bot.name, job_id.strip())
    if routine is None:
        raise ToolError(f"bot {run.bot.name} has no routine {job_id!r} (action=list shows them)")
    return routine


async def _create(
    run: RunContext,
    store: RoutineStore,
    scheduler: Routines | None,
    name: str | None,
    prompt: str | None,
    schedule: str | None,
    grace: str | None,
    channel: str | None,
    chat: str | None,
    thread: str | None,
    precheck: str | None,
) -> str:
    if not (name and prompt and schedule):
        missing = [
            k for k, v in (("name", name), ("prompt", prompt), ("schedule", schedule)) if not v
        ]
        raise ToolError(f"create needs name, prompt and schedule; missing: {', '.join(missing)}")
    fields = await _changes(run, name, prompt, schedule, grace, channel, chat, thread, precheck)
    target = fields.get("target") or await _current_target(run)
    routine = await store.create(
        run.bot.name,
        fields["name"],  # type: ignore[arg-type]
        fields["prompt"],  # type: ignore[arg-type]
        fields["schedule"],  # type: ignore[arg-type]
        target,  # type: ignore[arg-type]
        grace_seconds=fields.get("grace_seconds"),  # type: ignore[arg-type]
        precheck=str(fields.get("precheck", "")),
    )
    note = await _synced(scheduler)
    return f"Created {await _describe(run, routine, scheduler)}{note}"


async def _changes(
    run: RunContext,
    name: str | None,
    prompt: str | None,
    schedule: str | None,
    grace: str | None,
    channel: str | None,
    chat: str | None,
    thread: str | None,
    precheck: str | None = None,
) -> dict[str, object]:
    """The validated fields given: name, prompt (scanned), schedule (pinned), grace, target,
    precheck ("" removes it; judged by the gate at each run, like any command)."""
    changes: dict[str, object] = {}
    if precheck is not None:
        changes["precheck"] = precheck.strip()
    if name is not None:
        if not re.fullmatch(NAME_PATTERN, name):
            raise ToolError(f"name {name!r}: use lowercase letters, digits, '-' and '_'")
        changes["name"] = name
    if prompt is not None:
        if threat := scan(prompt):
            raise ToolError(f"prompt refused: {threat}. A routine's prompt is re-read unattended")
        changes["prompt"] = prompt.strip()
    try:
        if schedule is not None:
            changes["schedule"] = _pinned(run, schedule)
        if grace is not None:
            changes["grace_seconds"] = int(parse_duration(grace).total_seconds())
    except ScheduleError as exc:
        raise ToolError(str(exc)) from None
    if channel is not None or chat is not None or thread is not None:
        changes["target"] = await _target(run, channel, chat, thread)
    return changes


async def _target(
    run: RunContext, channel: str | None, chat: str | None, thread: str | None
) -> Target:
    """A target from what was given, the rest taken from this conversation where it fits."""
    here = await _current_target(run, required=False)
    if channel is not None and (here is None or channel != here.channel):
        try:  # this conversation's own channel delivers, whatever its name
            channel = resolve_channel(run.home, run.bot.name, channel, strict=False)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None
    same_channel = here is not None and channel in (None, here.channel)
    channel = channel or (here.channel if here else None)
    chat = chat or (here.chat if here and same_channel else None)
    if not (channel and chat):
        raise ToolError("to report elsewhere give both channel and chat")
    same_chat = here is not None and same_channel and chat == here.chat
    if thread is None:
        thread = here.thread if here and same_chat else ""
    return Target(channel, chat, thread, here.user if here and same_chat else "")


def _pinned(run: RunContext, schedule: str) -> str:
    tz = ZoneInfo(run.settings.timezone)
    now = datetime.now(tz)
    kept = pin(schedule, tz, now)
    parsed = parse_schedule(kept, tz, now=now)
    if parsed.once and not next_fire_times(parsed, tz, now, 1)[0] > now:
        raise ToolError(
            f"schedule {schedule!r} is in the past (now: {now.isoformat('T', 'minutes')})"
        )
    return kept


async def _current_target(run: RunContext, *, required: bool = True) -> Target | None:
    conversation = None
    if run.open_store is not None:
        store = await run.open_store(run.bot)
        conversation = await store.get_conversation(run.conversation_id)
    if conversation is None:
        if required:
            raise ToolError("this conversation has no address to report to; give channel and chat")
        return None
    return Target(conversation.channel, conversation.chat, conversation.thread, conversation.user)


async def _describe(run: RunContext, routine: Routine, scheduler: Routines | None) -> str:
    state = "paused" if routine.paused else f"next run {await _next(run, routine, scheduler)}"
    where = routine.target or "nowhere (history only)"
    check = f"; pre-check `{routine.precheck}`" if routine.precheck else ""
    return (
        f"routine {routine.name} (id {routine.id}): {routine.schedule}; {state}; "
        f"reports to {where}{check}."
    )


async def _next(run: RunContext, routine: Routine, scheduler: Routines | None) -> str:
    upcoming = await scheduler.next_fire_time(routine.id) if scheduler else None
    if upcoming is None:
        tz = ZoneInfo(run.settings.timezone)
        try:
            schedule = parse_schedule(routine.schedule, tz, anchor=routine.armed_at)
            times = next_fire_times(schedule, tz, datetime.now(tz), 1)
        except ScheduleError:
            return "never (the schedule no longer reads)"
        upcoming = times[0] if times and times[0] > datetime.now(tz) else None
    return upcoming.isoformat(timespec="minutes") if upcoming else "none (already ran)"


async def _list(run: RunContext, store: RoutineStore, scheduler: Routines | None) -> str:
    routines = await store.all(run.bot.name)
    if not routines:
        return f"Bot {run.bot.name} has no routines."
    lines = []
    for routine in routines:
        runs = await store.runs(routine.id, limit=1)
        last = f"; last run: {runs[0].status} at {runs[0].started_at[:16]}" if runs else ""
        lines.append(f"- {await _describe(run, routine, scheduler)}{last}")
    return "\n".join(lines)


ROUTINE_TOOLS = [cronjob_manage]
