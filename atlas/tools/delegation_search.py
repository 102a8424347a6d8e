"""delegation_search: what the executor instances did, from the delegation record in atlas.db
(atlas/executors/record.py; read through RecordRows, atlas/executors/record_rows.py, which has a
PostgreSQL side too) and the harnesses' own session logs, with FTS5 and no model.

The same four shapes as conversation_search: discovery (query), read (instance_id), scroll
(instance_id with around, in the harness's session) and browse (nothing). Everything an
executor wrote comes from outside (the files and pages it read): the tool is `untrusted`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from pydantic import Field

from atlas.errors import NotOnPostgres, ToolError
from atlas.executors.base import ExecutorError, SessionLog
from atlas.executors.record_rows import RecordRows, record_rows
from atlas.executors.record_search import InstanceSummary, RecordFilter
from atlas.executors.registry import ExecutorSet
from atlas.executors.session_gone import parse_started, why_missing
from atlas.store.home_db import HomeStore
from atlas.tools.conversations import parse_when
from atlas.tools.delegation_views import (
    BEST_SHARE,
    View,
    browsed,
    hit_lines,
    instance_header,
    log_around,
    log_ends,
    record_view,
)
from atlas.tools.registry import RunContext, only_for, tool

HIT_POOL = 10  # matching entries fetched for an instance that is not the best one
# Where delegate is, executor or not: the record also holds the person's own Claude Code
# sessions (the plugin reports them), recalled whether or not Atlas runs executors itself
# (tools-reference.md, Who has which tool).
WHERE_DELEGATE_IS = only_for("conversation", "bot", "routine")


def _time_range(run: RunContext, after: str | None, before: str | None) -> tuple[str | None, ...]:
    zone = ZoneInfo(run.settings.timezone)
    now = datetime.now(zone)
    start = parse_when(after, zone, now, name="after") if after else None
    end = parse_when(before, zone, now, name="before") if before else None
    if start and end and start >= end:
        raise ToolError(f"after={after!r} is not earlier than before={before!r}")
    utc = ZoneInfo("UTC")
    return tuple(
        m.astimezone(utc).isoformat(timespec="microseconds") if m else None for m in (start, end)
    )


@tool(
    deferred=True,
    read_only=True,
    pages_itself=True,
    untrusted=True,
    available=WHERE_DELEGATE_IS,
)
async def delegation_search(
    run: RunContext,
    query: Annotated[str | None, Field(description="words, all must match")] = None,
    instance_id: Annotated[str | None, Field(description="ex-3f9a2c, as shown")] = None,
    around: Annotated[int | None, Field(ge=0, description="a session entry's #")] = None,
    window: Annotated[int, Field(ge=0, le=20, description="entries each side")] = 5,
    limit: Annotated[int, Field(ge=1, le=10, description="instances")] = 3,
    executor: Annotated[str | None, Field(description="codex, claude-code@work")] = None,
    folder: Annotated[str | None, Field(description="part of the path")] = None,
    after: Annotated[str | None, Field(description="ISO date or 7d, 24h, 2w")] = None,
    before: str | None = None,
    include_tools: bool = False,
) -> str:
    """What the outside executors (Claude Code, Codex) did, Atlas's tasks and the person's own:
    each turn's prompt, steers, questions and who answered, final text, files changed. query:
    the best match with every turn, others by matching entries. instance_id: read its record,
    then the start and end of the harness's own session log; with around, scroll that log.
    Neither: the latest. include_tools: tool calls in the session log too."""
    if around is not None and instance_id is None:
        raise ToolError("around needs the instance_id whose session it scrolls")
    if around is not None and query:
        raise ToolError("give query to search, or around to scroll a session; not both")
    start, end = _time_range(run, after, before)
    where = RecordFilter(
        executor=executor.strip() if executor else None,
        folder=folder.strip() if folder else None,
        after=start,
        before=end,
        bot=None if run.bot.is_main else run.bot.name,
    )
    view = View(
        ZoneInfo(run.settings.timezone), run.settings.limits.tool_result_chars, include_tools
    )
    if run.services is not None:  # the process's atlas.db: a worker's runs in the home's process
        answer = await _answer(
            run,
            run.services.engines.records,
            where,
            view,
            query,
            instance_id,
            around,
            window,
            limit,
        )
    elif run.home.settings.store.url is not None:  # never the SQLite file of a PostgreSQL home
        raise NotOnPostgres("delegation_search without a running home", run.home.settings.store.url)
    elif not run.home.db_path.exists():
        return "No delegation is recorded yet."
    else:  # no dispatcher around this call (a test, a direct call): the file, for this call
        store = HomeStore(run.home.db_path)
        try:
            answer = await _answer(
                run, store, where, view, query, instance_id, around, window, limit
            )
        finally:
            await store.close()
    if len(answer) > view.budget:  # the views are sized to fit; this is the backstop
        answer = answer[: view.budget - 80] + "\n(cut here to stay short: ask for less)"
    return answer


async def _answer(
    run: RunContext,
    store: HomeStore | RecordRows,
    where: RecordFilter,
    view: View,
    query: str | None,
    instance_id: str | None,
    around: int | None,
    window: int,
    limit: int,
) -> str:
    """The shape the arguments ask for: browse, discover, read or scroll."""
    text = query.strip() if query and query.strip() else None
    if instance_id is None:
        if text is None:
            return await _browse(store, where, view, limit)
        return await _discover(store, where, view, text, limit)
    turns = await record_rows(store).instance_turns(instance_id.strip())
    if not turns or (
        where.bot and not (turns[0]["conversation"] or "").startswith(f"{where.bot}:")
    ):
        raise ToolError(f"there is no delegation {instance_id!r} in the record")
    log, harness, why = await _session(run, turns)
    if around is not None:
        if log is None:
            raise ToolError(why)
        return log_around(log, harness, around, window, view)
    budget = int(view.budget * BEST_SHARE)
    lines = [instance_header(turns, view), *record_view(turns, view, budget)]
    used = sum(len(line) + 1 for line in lines)
    tail = why if log is None else log_ends(log, harness, view, view.budget - used)
    return "\n".join([*lines, "", tail])


async def _session(
    run: RunContext, turns: list[dict[str, Any]]
) -> tuple[SessionLog | None, str, str]:
    """The harness's own log of the instance's latest session (read from its files by its
    executor plugin), its name, and why there is none."""
    latest = next((t for t in reversed(turns) if t["session_id"]), None)
    live = None
    if latest is None and run.services is not None and run.services.executors is not None:
        live = run.services.executors.workbench.get(turns[-1]["instance_id"])
    session_id = latest["session_id"] if latest else (live.session_id if live else None)
    turn = latest or turns[-1]
    harness = turn["executor"]
    if not session_id:
        return (
            None,
            harness,
            (
                "No session id of the harness is recorded for it, so its own log cannot be read "
                "back; the record above is all there is."
            ),
        )
    try:
        executors = ExecutorSet.for_home(run.home)
        executor, account = executors.resolve(turn["account"])
        log = await asyncio.to_thread(
            executor.session_log, account, session_id, Path(turn["folder"])
        )
    except ExecutorError as exc:
        return None, harness, f"The harness's own log of session {session_id} cannot be read: {exc}"
    if log.deleted:
        why = why_missing(
            harness,
            account.config_dir,
            parse_started(turn.get("started_at")),
            executor.keeps_sessions_days(account),
        )
        log = dataclasses.replace(log, why_missing=why)
    return log, harness, ""


async def _turns_of(
    store: HomeStore | RecordRows, found: list[InstanceSummary]
) -> list[list[dict[str, Any]]]:
    rows = record_rows(store)
    return [await rows.instance_turns(item.instance_id) for item in found]


async def _browse(
    store: HomeStore | RecordRows, where: RecordFilter, view: View, limit: int
) -> str:
    found = await record_rows(store).latest_instances(where, limit=limit)
    if not found:
        ranged = where.after or where.before or where.executor or where.folder
        return "No delegation" + (" matches those filters." if ranged else " is recorded yet.")
    parts = [f"{len(found)} delegation(s), latest first (times in {view.zone.key})."]
    parts += [browsed(turns, view) for turns in await _turns_of(store, found)]
    parts.append("Next: instance_id reads one; query searches them all.")
    return "\n\n".join(parts)


async def _discover(
    store: HomeStore | RecordRows, where: RecordFilter, view: View, text: str, limit: int
) -> str:
    found = await record_rows(store).match_instances(text, where, limit=limit)
    if not found:
        return (
            f"No delegation matches {text!r}"
            + (" with those filters" if where != RecordFilter(bot=where.bot) else "")
            + ". Every word must appear; try fewer or other words."
        )
    parts = [f"{len(found)} delegation(s) match {text!r} (best first; times in {view.zone.key})."]
    rest = view.budget
    for rank, (item, turns) in enumerate(zip(found, await _turns_of(store, found), strict=True)):
        about = f"{item.hits} matching entr{'y' if item.hits == 1 else 'ies'}"
        if rank == 0:
            lines = [instance_header(turns, view, about + " — in full:")]
            lines += record_view(turns, view, min(int(view.budget * BEST_SHARE), rest))
        else:
            hits = await record_rows(store).matching_entries(text, item.instance_id, limit=HIT_POOL)
            lines = [instance_header(turns, view, about + ":"), *hit_lines(turns, hits, item.hits)]
        block = "\n".join(lines)
        if len(block) > rest:
            parts.append(f"(… {len(found) - rank} more left out to stay short)")
            break
        parts.append(block)
        rest -= len(block) + 2
    parts.append("Next: instance_id reads one with its session's start and end.")
    return "\n\n".join(parts)


DELEGATION_TOOLS = [delegation_search]
