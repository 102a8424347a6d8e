"""Routines: each routine with its schedule in words, its next fire times (the computation of
`atlas routines next`), its last outcomes and its run history; run now, pause and resume go
through the running daemon's scheduler as cronjob_manage does (without a daemon, pause and
resume change atlas.db and the daemon picks them up at its next poll; run now is refused).

Live over the dashboard's event stream: the scheduler publishes `routines` when a run starts or
ends and when routines are synced (a pause or resume, from here or anywhere), and the pages
fetch their live parts again (`/routines/live`, `/routines/<id>/head`, `/routines/<id>/runs`);
also once each time the stream reopens after a drop, so nothing that changed meanwhile is missed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from atlas.dashboard.actions import record_action
from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.page import Page
from atlas.dashboard.render import render, see_other
from atlas.errors import AtlasError
from atlas.routines.schedule import ScheduleError, next_fire_times, parse_schedule
from atlas.routines.store import Routine, RoutineRun, RoutineStore
from atlas.tools.services import Routines

PER_PAGE = 25  # routines on one page
RUNS_PER_PAGE = 30  # a routine's history, one page
LAST_OUTCOMES = 3
NEXT_TIMES = 3
_CRON = re.compile(r"^\s*(\S+\s+){4}\S+\s*$")


@dataclass(frozen=True)
class RoutineView:
    routine: Routine
    words: str
    upcoming: list[datetime]
    last: list[RoutineRun]
    running: bool


def scheduler_of(dashboard: Dashboard) -> Routines | None:
    """The daemon's running scheduler, through the dispatcher's services (cronjob_manage's);
    the dashboard listens to it (once) so the pages are live."""
    dispatcher = dashboard.dispatcher
    services = dispatcher.services if dispatcher is not None else None
    scheduler = services.routines if services is not None else None
    if scheduler is not None:
        dashboard.watch_routines(scheduler)
    return scheduler


def _running(scheduler: Routines | None, routine: Routine) -> bool:
    is_running = getattr(scheduler, "is_running", None)  # RoutineScheduler's, not the protocol's
    return bool(is_running(routine.id)) if is_running is not None else False


def store_of(dashboard: Dashboard) -> RoutineStore:
    scheduler = scheduler_of(dashboard)
    return scheduler.store if scheduler is not None else dashboard.routine_store()  # type: ignore[return-value]


def in_words(schedule: str) -> str:
    """The schedule as a person reads it: the plain-English forms are words already; a cron
    expression and an ISO date-time are said."""
    if _CRON.match(schedule) and not re.search(r"[a-z]{3,}", schedule.split(None, 4)[0]):
        minute, hour, day, month, weekday = schedule.split()
        return f"cron: minute {minute}, hour {hour}, day {day}, month {month}, weekday {weekday}"
    try:
        moment = datetime.fromisoformat(schedule.strip())
    except ValueError:
        return schedule
    return f"once, at {moment.isoformat(sep=' ', timespec='minutes')}"


def upcoming(dashboard: Dashboard, routine: Routine, count: int = NEXT_TIMES) -> list[datetime]:
    """The next fire times, as `atlas routines next` computes them (from the routine's armed
    time, so `every 2h` counts from when it was set up); none while paused."""
    if routine.paused:
        return []
    tz, now = dashboard.zone, dashboard.now()
    try:
        schedule = parse_schedule(routine.schedule, tz, anchor=routine.armed_at)
    except ScheduleError:
        return []
    return [t for t in next_fire_times(schedule, tz, now, count) if t > now]


def _page_number(request: web.Request) -> int:
    text = request.query.get("page", "1")
    return max(1, int(text)) if text.isdigit() else 1


async def routines_page(request: web.Request) -> web.Response:
    return render(request, "routines.html", **await _list_values(request))


async def routines_live(request: web.Request) -> web.Response:
    """The list alone, fetched again on each `routines` event."""
    return render(request, "routines_live.html", **await _list_values(request))


async def _list_values(request: web.Request) -> dict[str, object]:
    dashboard = dashboard_of(request)
    store = store_of(dashboard)
    bot = request.query.get("bot", "")
    page = _page_number(request)
    everything = await store.all(bot or None)
    shown = everything[(page - 1) * PER_PAGE : page * PER_PAGE]
    scheduler = scheduler_of(dashboard)
    views = [
        RoutineView(
            routine,
            in_words(routine.schedule),
            upcoming(dashboard, routine),
            await store.runs(routine.id, limit=LAST_OUTCOMES),
            _running(scheduler, routine),
        )
        for routine in shown
    ]
    return dict(
        views=views,
        bots=list(dashboard.home.bots.values()),
        bot=bot,
        page=page,
        more=len(everything) > page * PER_PAGE,
        daemon=scheduler is not None,
        done=request.query.get("done", ""),
    )


async def _routine(request: web.Request) -> tuple[Dashboard, RoutineStore, Routine]:
    dashboard = dashboard_of(request)
    store = store_of(dashboard)
    key = request.match_info["id"]
    routine = await store.get(int(key)) if key.isdigit() else None
    if routine is None:
        raise web.HTTPNotFound(text=f"there is no routine {key!r}")
    return dashboard, store, routine


async def routine_page(request: web.Request) -> web.Response:
    return await _routine_view(request, "routine.html")


async def routine_runs(request: web.Request) -> web.Response:
    """The run history alone, fetched again on each `routines` event."""
    return await _routine_view(request, "routine_runs.html")


async def routine_head(request: web.Request) -> web.Response:
    """The title (paused, running), schedule, next times and buttons, fetched again likewise."""
    return await _routine_view(request, "routine_head.html")


async def _routine_view(request: web.Request, template: str) -> web.Response:
    dashboard, store, routine = await _routine(request)
    page = _page_number(request)
    runs = await store.runs(routine.id, limit=page * RUNS_PER_PAGE + 1)
    shown = runs[(page - 1) * RUNS_PER_PAGE : page * RUNS_PER_PAGE]
    scheduler = scheduler_of(dashboard)
    return render(
        request,
        template,
        view=RoutineView(
            routine,
            in_words(routine.schedule),
            upcoming(dashboard, routine, 5),
            shown,
            _running(scheduler, routine),
        ),
        page=page,
        more=len(runs) > page * RUNS_PER_PAGE,
        daemon=scheduler is not None,
        done=request.query.get("done", ""),
    )


async def run_now(request: web.Request) -> web.Response:
    """POST: start a run in the daemon, as cronjob_manage's `run` does."""
    dashboard, _, routine = await _routine(request)
    scheduler = scheduler_of(dashboard)
    if scheduler is None:
        raise web.HTTPConflict(
            text="routines run only inside the daemon (`atlas run`), which does not serve this "
            "page; `atlas routines run NAME` runs one in a terminal"
        )
    try:
        run_id = await scheduler.run_now(routine)
    except AtlasError as exc:  # running already
        raise web.HTTPConflict(text=str(exc)) from None
    await record_action(
        dashboard.audit,
        routine.bot,
        "cronjob_manage",
        f"run routine {routine.name} now (run {run_id})",
        "the person ran the routine on the dashboard",
    )
    dashboard.events.publish("home")
    return see_other(f"/routines/{routine.id}?done=started")


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    dashboard, store, routine = await _routine(request)
    action = "pause" if paused else "resume"
    routine = await store.update(routine.id, paused=paused)
    scheduler = scheduler_of(dashboard)
    if scheduler is not None:
        await scheduler.sync()  # as cronjob_manage: the job goes (or comes back) now
    else:  # no scheduler to publish it: the open pages hear of it from here
        dashboard.events.publish("routines")
    await record_action(
        dashboard.audit,
        routine.bot,
        "cronjob_manage",
        f"{action} routine {routine.name}",
        f"the person {action}d the routine on the dashboard",
    )
    dashboard.events.publish("home")
    back = request.query.get("back", "")
    where = f"/routines/{routine.id}" if back == "routine" else "/routines"
    return see_other(f"{where}?done={action}d")


async def pause(request: web.Request) -> web.Response:
    return await _set_paused(request, True)


async def resume(request: web.Request) -> web.Response:
    return await _set_paused(request, False)


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/routines", routines_page)
    router.add_get("/routines/live", routines_live)  # before /routines/{id}
    router.add_get("/routines/{id}", routine_page)
    router.add_get("/routines/{id}/head", routine_head)
    router.add_get("/routines/{id}/runs", routine_runs)
    router.add_post("/routines/{id}/run", run_now)
    router.add_post("/routines/{id}/pause", pause)
    router.add_post("/routines/{id}/resume", resume)


PAGE = Page("Routines", "/routines", setup)
