"""What the dashboard reads: the live home, its stores and the daemon's in-memory state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from aiohttp import web

from atlas.dashboard.auth import Session, Signer
from atlas.dashboard.hub import EventHub, Pushed
from atlas.dashboard.reads import DashboardReads, SqliteDashboardReads
from atlas.dashboard.usage_cache import UsageCache
from atlas.pending_asks import PendingAsks

if TYPE_CHECKING:
    from atlas.channels.base import Address
    from atlas.channels.supervisor import ChannelHealth
    from atlas.dashboard.chat_channel import BrowserChannel, ChatEvent
    from atlas.dispatch import Dispatcher
    from atlas.home import Bot, Home
    from atlas.routines.engine import RoutineEngine
    from atlas.store.conversations import ConversationStore
    from atlas.store.home_db import HomeStore
    from atlas.tools.registry import ConversationState


ASK_MARGIN = 60.0  # seconds past the gate's ask timeout a forwarded chat question waits


def _nothing() -> Mapping:  # type: ignore[type-arg]
    return {}


@dataclass
class Dashboard:
    """The daemon hands in its own runtime's parts, so the dashboard shares each store's one
    writer and sees the channels' health and the conversations' state as they are now."""

    home: Home
    open_store: Callable[[Bot], Awaitable[ConversationStore]]
    audit: HomeStore  # atlas.db: the gate's record, routines, pairing codes
    signer: Signer
    channel_health: Callable[[], Mapping[str, ChannelHealth]] = field(default=_nothing)
    conversation_states: Callable[[], Mapping[tuple[str, int], ConversationState]] = field(
        default=_nothing
    )
    events: EventHub = field(default_factory=EventHub)  # what makes pages live
    usage: UsageCache = field(default_factory=UsageCache)  # the Usage page's past hours
    # The questions turns wait on (the dispatcher's, atlas/pending_asks.py): the Waiting page.
    asks: PendingAsks = field(default_factory=PendingAsks)
    # The Chat page's: the dispatcher its messages go to, and its channel (both set by attach).
    dispatcher: Dispatcher | None = None
    chat: BrowserChannel | None = None
    # The Chat page's events as the browsers get them (pages/chat.py's chat_events, set by
    # build_app).
    render_chat: Callable[[Dashboard, Address, ChatEvent], list[Pushed]] | None = None
    # What the pages read of the home's shared state (atlas/dashboard/reads.py): atlas.db's
    # (`audit`) unless another engine's is handed in (PostgreSQL's, atlas/store/pg/dashboard.py).
    reads: DashboardReads | None = None
    # The routines' store when no scheduler runs (`routine_store`): atlas.db's by default.
    routines: RoutineEngine | None = None

    def __post_init__(self) -> None:
        if self.reads is None:
            self.reads = SqliteDashboardReads(self.audit)
        self.asks.listen(lambda: self.events.publish("waiting"))

    def routine_store(self) -> RoutineEngine:
        """The routines, read without the scheduler: the engine handed in, else atlas.db's."""
        if self.routines is None:
            from atlas.routines.store import RoutineStore

            self.routines = RoutineStore(self.audit)
        return self.routines

    def attach(self, dispatcher: Dispatcher) -> None:
        """Serve the running dispatcher's questions (and, on every change, the `waiting`
        event), register the Chat page's channel in it, and hear of its routines' runs."""
        from atlas.dashboard.chat_channel import WEB_CHANNEL, BrowserChannel

        self.asks = dispatcher.asks
        self.asks.listen(lambda: self.events.publish("waiting"))
        self.dispatcher = dispatcher
        registered = dispatcher.channels.get(WEB_CHANNEL)  # the daemon's, before recovery
        self.chat = registered if isinstance(registered, BrowserChannel) else BrowserChannel()
        dispatcher.channels[WEB_CHANNEL] = self.chat
        self.chat.listen(self._chat_said)
        # A worker's turn's wait here is never cancelled (atlas/workers/asks.py): it ends
        # a minute after the gate's own timeout has surely ended the turn's.
        self.chat.wait_limit = self.home.settings.trust.ask_timeout + ASK_MARGIN
        services = dispatcher.services
        if services is not None and services.routines is not None:
            self.watch_routines(services.routines)

    def _chat_said(self, address: Address, event: ChatEvent) -> None:
        """A Chat page event, rendered once, for every browser's event stream (by the Chat
        page's renderer, which build_app hands over: the page imports this module)."""
        if self.render_chat is None:
            return  # no app serves the dashboard: no browser to tell
        for pushed in self.render_chat(self, address, event):
            self.events.publish(pushed)

    def watch_routines(self, scheduler: object) -> None:
        """Publish `routines` whenever the daemon's scheduler changes something the Routines
        page shows (a run started or ended, a pause or resume). Called at attach and again by
        the page (a scheduler started after the dashboard); the scheduler keeps one callback."""
        listen = getattr(scheduler, "listen", None)  # RoutineScheduler's, not the protocol's
        if listen is not None:
            listen(self._routines_changed)

    def _routines_changed(self) -> None:
        self.events.publish("routines")

    def watch_channels(self) -> None:
        """Publish `home` whenever a channel's health changes (call once its channels exist)."""
        for health in self.channel_health().values():
            health.listen(lambda _name, _health: self.events.publish("home"))

    async def store(self, bot: Bot) -> ConversationStore | None:
        """The bot's store; None for a bot that never talked (opening would create its file).
        On a home whose store is PostgreSQL, its share of the database, never a
        conversations.db left from before `atlas store migrate`."""
        if self.home.settings.store.url is None and not bot.db_path.exists():
            return None
        return await self.open_store(bot)

    @property
    def home_reads(self) -> DashboardReads:
        """The reads of the home's shared state (set at creation: atlas.db's by default)."""
        if self.reads is None:
            self.reads = SqliteDashboardReads(self.audit)
        return self.reads

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.home.settings.timezone)

    def now(self) -> datetime:
        return datetime.now(self.zone)


DASHBOARD = web.AppKey("dashboard", Dashboard)
NAV = web.AppKey("nav", list[tuple[str, str]])  # (title, path) of each page, in order
SESSION = web.RequestKey("session", Session)  # set by the app's guard for a logged-in request


def dashboard_of(request: web.Request) -> Dashboard:
    return request.app[DASHBOARD]
