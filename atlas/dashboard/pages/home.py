"""Home: every bot with its channels' health, turns and tokens today, the routines due next,
and what waits for the person. The live part is fetched again (`/live`) on each `home` event
of the page's event stream (atlas/dashboard/events.py)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, time

from aiohttp import web

from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.conversation_reads import conversation_reads
from atlas.dashboard.page import Page
from atlas.dashboard.queries import DayStats
from atlas.dashboard.render import render
from atlas.home import Bot
from atlas.store.db import utc_now_iso

log = logging.getLogger(__name__)
ROUTINES_SHOWN = 8


@dataclass
class ChannelView:
    name: str
    state: str  # starting | up | reconnecting | stopped
    detail: str


@dataclass
class BotView:
    name: str
    title: str
    model: str
    mode: str
    is_main: bool
    today: DayStats
    channels: list[ChannelView] = field(default_factory=list)


@dataclass(frozen=True)
class DueRoutine:
    bot: str
    name: str
    schedule: str
    at: datetime


@dataclass(frozen=True)
class Waiting:
    approvals: list[tuple[str, int, str]]  # bot, conversation id, question
    pairings: int

    @property
    def count(self) -> int:
        return len(self.approvals) + self.pairings


async def _today(dashboard: Dashboard, bot: Bot, since: str) -> DayStats:
    store = await dashboard.store(bot)
    if store is None:
        return DayStats()
    return await conversation_reads(store).stats_since(since)


async def bot_views(dashboard: Dashboard) -> list[BotView]:
    midnight = datetime.combine(dashboard.now().date(), time(), dashboard.zone)
    since = midnight.astimezone(UTC).isoformat(timespec="microseconds")
    bots = list(dashboard.home.bots.values())
    stats = await asyncio.gather(*(_today(dashboard, bot, since) for bot in bots))
    health = dashboard.channel_health()
    views = []
    for bot, today in zip(bots, stats, strict=True):
        view = BotView(
            bot.name, bot.settings.title, bot.model, bot.settings.mode, bot.is_main, today
        )
        for name, channel in sorted(health.items()):
            if name.partition(":")[2] == bot.name:
                now = channel.current
                view.channels.append(ChannelView(name, now.state, now.describe()))
        views.append(view)
    return views


async def due_routines(dashboard: Dashboard) -> list[DueRoutine]:
    from atlas.routines.schedule import ScheduleError, next_fire_times, parse_schedule

    zone = dashboard.home.settings.timezone
    now = dashboard.now()
    due = []
    for routine in await dashboard.routine_store().all():
        if routine.paused:
            continue
        try:
            schedule = parse_schedule(routine.schedule, zone, anchor=routine.armed_at)
            upcoming = [t for t in next_fire_times(schedule, zone, now, 1) if t > now]
        except ScheduleError as exc:  # a file edited by hand; `atlas routines` says more
            log.info("routine %s/%s: %s", routine.bot, routine.name, exc)
            continue
        if upcoming:
            due.append(DueRoutine(routine.bot, routine.name, routine.schedule, upcoming[0]))
    return sorted(due, key=lambda d: d.at)[:ROUTINES_SHOWN]


async def waiting(dashboard: Dashboard) -> Waiting:
    approvals = [
        (bot, conversation, question)
        for (bot, conversation), state in dashboard.conversation_states().items()
        for question in state.pending_asks
    ]
    approvals += [  # a worker process's turns': their states are there, their questions here
        (ask.address.bot, ask.conversation_id, ask.question)
        for ask in dashboard.asks.open()
        if ask.share and ask.kind == "approval"
    ]
    pairings = await dashboard.home_reads.pending_pairings(utc_now_iso())
    return Waiting(approvals, pairings)


async def _values(request: web.Request) -> dict[str, object]:
    dashboard = dashboard_of(request)
    bots, routines, waits = await asyncio.gather(
        bot_views(dashboard), due_routines(dashboard), waiting(dashboard)
    )
    return {"bots": bots, "routines": routines, "waiting": waits}


async def home_page(request: web.Request) -> web.Response:
    return render(request, "home.html", **await _values(request))


async def home_live(request: web.Request) -> web.Response:
    """The live part alone, for htmx to swap in."""
    return render(request, "home_live.html", **await _values(request))


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/", home_page)
    router.add_get("/live", home_live)


PAGE = Page("Home", "/", setup)
