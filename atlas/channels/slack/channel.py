"""The Slack channel (slack-bolt, async): Socket Mode by default, the HTTP Events API as an option.

People talk to a bot in a direct message or by mentioning it in a channel; the bot answers in
the message's thread. The channel is built in layers, each a module: slack_sending (replies,
files, the typing reaction), slack_asking (approvals and ask_user's questions), slack_inbound
(events, conversation keys, commands); this module wires them to a bot and runs the
connection. slack-bolt is imported only when a bot configures Slack.

In Socket Mode, slack_sdk's client reconnects by itself when Slack drops the socket; a task of
ours, run under a Supervisor, watches it. Health follows the client's connection ("connected",
or "reconnecting since T" while it is down). If the client's own tasks died (then nothing would
ever read an event again) the watch raises: the supervisor logs it with its traceback and the
next run opens a fresh client, waiting longer after each failure.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from atlas.channels.access import Access
from atlas.channels.chat_common import BackgroundTasks, ChatGenerations
from atlas.channels.send_errors import SendError
from atlas.channels.settings import SlackSettings, channel_settings, secret
from atlas.channels.slack.asking import PendingAsk
from atlas.channels.slack.delivery import SlackSender
from atlas.channels.slack.errors import DEAD_TOKEN_ERRORS, slack_error
from atlas.channels.slack.format import ASK_ACTION_PREFIX
from atlas.channels.slack.inbound import COMMANDS, SlackInbound, StoreHeld
from atlas.channels.slack.questions import QUESTION_ACTION_PREFIX
from atlas.channels.slack.reactions import TypingMarks
from atlas.channels.slack.sending import slack_channel
from atlas.channels.supervisor import ChannelHealth, Supervisor
from atlas.errors import AtlasError, ConfigError
from atlas.home import Bot

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.authorization import AuthorizeResult

    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

PLATFORM = "slack"
DEFAULT_API = "https://slack.com/api/"
WEB_API_TIMEOUT = 30  # seconds per Web API call: slack_sdk's default
SOCKET_CHECK_SECONDS = 1.0  # how often the watch looks at the Socket Mode client
SOCKET_CONNECTED = "connected (Socket Mode)"
SOCKET_DOWN = "the Socket Mode connection is down; slack_sdk is reconnecting"


# What a running Slack channel imports (the app, Socket Mode and the Web API client).
SLACK_MODULES = (
    "slack_bolt.async_app",
    "slack_bolt.adapter.socket_mode.async_handler",
    "slack_sdk.web.async_client",
)


class SocketModeDied(AtlasError):
    """slack_sdk's Socket Mode client stopped working and will not recover by itself."""


def create_channel(bot: Bot, dispatcher: Dispatcher) -> SlackChannel:
    """The bot's Slack channel from `[channels.slack]`; ConfigError when a secret is unset."""
    settings = channel_settings(bot, PLATFORM, SlackSettings)
    bot_token = secret(bot, PLATFORM, "bot_token_env", settings.bot_token_env)
    app_token = signing_secret = None
    if settings.mode == "socket":
        app_token = secret(bot, PLATFORM, "app_token_env", settings.app_token_env)
    else:
        signing_secret = secret(bot, PLATFORM, "signing_secret_env", settings.signing_secret_env)
    return SlackChannel(
        bot,
        settings,
        dispatcher,
        bot_token=bot_token,
        app_token=app_token,
        signing_secret=signing_secret,
    )


class SlackChannel(SlackInbound):
    sdk_version = 1  # the channel plugin SDK (atlas/plugins.py); registered in pyproject.toml
    streams = False

    @classmethod
    def create(cls, bot: Bot, dispatcher: Dispatcher) -> SlackChannel:
        return create_channel(bot, dispatcher)

    @staticmethod
    def import_libraries() -> None:
        """slack-bolt's modules, imported before they are needed: the home's process does it
        once for every worker it forks (atlas/workers/fork.py)."""
        for module in SLACK_MODULES:
            importlib.import_module(module)

    def __init__(
        self,
        bot: Bot,
        settings: SlackSettings,
        dispatcher: Dispatcher,
        *,
        bot_token: str,
        app_token: str | None = None,
        signing_secret: str | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        self.bot = bot
        self.settings = settings
        self.dispatcher = dispatcher
        self.name = f"{PLATFORM}:{bot.name}"
        engines = dispatcher.runtime.engines
        self.access = Access(engines.pairing, bot.name, PLATFORM, settings.allowed_users)
        self.generations = ChatGenerations(engines.generations, self.name)
        self._bot_token = bot_token
        self._app_token = app_token
        self._signing_secret = signing_secret
        self._retry_base_delay = retry_base_delay
        self.bot_user_id = ""
        self._bot_id = ""
        self._team_id: str | None = None
        self._sender = None
        self._handler: Any = None  # AsyncSocketModeHandler, when in Socket Mode
        self._app: AsyncApp | None = None
        self.health = ChannelHealth(self.name)
        self.activity = "up"  # what "up" means here, once started (connected, serving)
        limits = dispatcher.runtime.home.settings.limits
        self.socket_check_seconds = SOCKET_CHECK_SECONDS
        self._socket_watch = Supervisor(
            f"{self.name} Socket Mode",
            lambda: self._watch_socket(),
            self.health,
            first_delay=limits.retry_base_delay,
            max_delay=limits.retry_max_delay,
        )
        self._http: Any = None  # aiohttp AppRunner, when serving the Events API
        # The Web API client's session: slack_sdk opens (and closes) a session per call when it
        # has none, so every call paid a new connection and, against Slack, a TLS handshake.
        self._web_session: Any = None
        self._seen = OrderedDict()
        self._threads = set()
        self._last_message = {}
        self._reacting = {}
        self._asks = {}
        self._question_sets = {}
        self._background = BackgroundTasks()
        self._marks = TypingMarks(
            self.name, lambda method, **params: self.sender.call_once(method, **params)
        )

    async def start(self) -> None:
        """Connect: learn who the bot is, then open Socket Mode or the Events API endpoint."""
        import aiohttp
        from slack_sdk.web.async_client import AsyncWebClient

        await self._socket_watch.stop()
        await self._close_transport()  # a retried start must not leave a second socket
        base_url = self.settings.api_base or DEFAULT_API
        # slack_sdk's own per-call timeout, which it sets only on the sessions it makes.
        self._web_session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=WEB_API_TIMEOUT)
        )
        client = AsyncWebClient(
            token=self._bot_token,
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=WEB_API_TIMEOUT,
            session=self._web_session,
            retry_handlers=[],  # SlackSender retries, without posting anything twice
        )
        self._sender = SlackSender(client, base_delay=self._retry_base_delay)
        try:
            identity = await self.sender.call("auth.test")
        except SendError as exc:
            _raise_if_token_dead(self.name, "bot token", self.settings.bot_token_env, exc)
            raise AtlasError(f"{self.name}: the bot token was refused: {exc}") from exc
        self.bot_user_id = str(identity.get("user_id", ""))
        self._bot_id = str(identity.get("bot_id", ""))
        self._team_id = identity.get("team_id")
        app = self._app = self._build_app(client)
        if self.settings.mode == "socket":
            await self._open_socket(await self._socket_url(client))
            self.activity = SOCKET_CONNECTED
            self._socket_watch.start()
        else:
            await self._serve_http(app)
            listen = f"{self.settings.http_listen}:{self.settings.http_port}"
            self.activity = f"serving the Events API on {listen}"
        if not self.health.holding:
            self.health.up(self.activity)
        log.info("%s: connected as %s (%s mode)", self.name, self.bot_user_id, self.settings.mode)

    async def _socket_url(self, client: Any) -> str | None:
        """A Socket Mode URL, asked for here so that a dead app token is a ConfigError:
        slack_sdk's client would retry it forever, every ping interval, as "reconnecting".
        None after another failure, which is left to slack_sdk (it retries, as it should)."""
        from slack_sdk.errors import SlackApiError

        try:
            response = await client.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            _raise_if_token_dead(self.name, "app token", self.settings.app_token_env, exc)
            return None
        return str(response["url"])

    async def _open_socket(self, url: str | None = None) -> None:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        assert self._app is not None  # built by start()
        app = self._app
        self._handler = AsyncSocketModeHandler(app, self._app_token, web_client=app.client)
        self._handler.client.wss_uri = url  # None: the client asks for one itself
        await self._handler.connect_async()

    async def _watch_socket(self) -> None:
        """Until cancelled: health follows the Socket Mode client's connection; raises
        SocketModeDied when the client can no longer recover, after closing it."""
        if self._handler is None:  # run again after a failure: a fresh client
            await self._open_socket()
        handler = self._handler
        suspect: object = None
        try:
            while True:
                client = handler.client
                # While reconnecting, slack_sdk lets an old task end just before it swaps in
                # the new one: only a task still ended at the next look is dead.
                ended = _ended_task(client)
                if ended is not None and ended is suspect:
                    _raise_dead(client, ended)
                suspect = ended
                if not await client.is_connected():
                    self.health.reconnecting(SOCKET_DOWN)
                elif self.health.holding:  # connected, but nothing can be stored
                    self.health.reconnecting(self.health.holding)
                else:
                    self.health.up(SOCKET_CONNECTED)
                await asyncio.sleep(self.socket_check_seconds)
        except Exception:
            if self._handler is handler:
                self._handler = None
                await handler.close_async()
            raise

    async def stop(self) -> None:
        await self._socket_watch.stop()
        for pending in list(self._asks.values()):
            if not pending.answer.done():
                pending.answer.set_result(None)
        for asked in list(self._question_sets.values()):
            asked.cancel("the Slack channel stopped")
        await self._marks.close()
        await self._close_transport()
        await self._background.cancel_all()

    async def _close_transport(self) -> None:
        if self._handler is not None:
            await self._handler.close_async()
            self._handler = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        if self._web_session is not None:
            await self._web_session.close()
            self._web_session = None

    def _build_app(self, client: Any) -> AsyncApp:
        from slack_bolt.async_app import AsyncApp

        # Bolt passes arguments by parameter name and counts `self` as one: plain closures.
        async def authorize(team_id: str | None = None) -> AuthorizeResult:
            return self._authorize(team_id)

        # With process_before_response, Slack hears back (the Events API's HTTP answer, Socket
        # Mode's ack) only when a listener returns: a message is acknowledged once it is stored
        # (or 5xx / no ack when the store cannot write: Slack sends it again). So listeners
        # return quickly; clicks are acknowledged first and handled in the background.
        async def on_message(event: dict[str, Any], body: dict[str, Any]) -> None:
            await self._on_message(event, body)

        async def on_button(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            self._background.spawn(self._on_button(body, action))

        async def on_question(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            self._background.spawn(self._on_question_action(body, action))

        async def on_command(ack: Any, command: dict[str, Any]) -> None:
            await self._on_slash_command(ack, command)

        async def on_error(error: Exception) -> None:
            if isinstance(error, StoreHeld):
                return  # said once, in one line, when the holding began (slack/inbound.py)
            log.error("%s: an event failed", self.name, exc_info=error)

        app = AsyncApp(
            client=client,
            authorize=authorize,
            signing_secret=self._signing_secret or "",
            request_verification_enabled=self.settings.mode == "http",
            process_before_response=True,
        )
        app.error(on_error)
        app.event("message")(on_message)
        app.event("app_mention")(on_message)
        app.action(re.compile(f"^{ASK_ACTION_PREFIX}:"))(on_button)
        app.action(re.compile(f"^{QUESTION_ACTION_PREFIX}:"))(on_question)
        for command in COMMANDS:
            app.command(f"/{command}")(on_command)
        return app

    def _authorize(self, team_id: str | None) -> AuthorizeResult:
        """Who we are, known from auth.test at start: no auth.test per event."""
        from slack_bolt.authorization import AuthorizeResult

        return AuthorizeResult(
            enterprise_id=None,
            team_id=team_id or self._team_id,
            bot_token=self._bot_token,
            bot_id=self._bot_id,
            bot_user_id=self.bot_user_id,
        )

    async def _serve_http(self, app: AsyncApp) -> None:
        """The Events API: Slack posts signed requests here; the signature is checked before
        anything else is read (slack/events_http.py)."""
        from aiohttp import web

        from atlas.channels.slack.events_http import MAX_BODY, events_endpoint

        events = events_endpoint(app, self._signing_secret or "", self.name)
        web_app = web.Application(client_max_size=MAX_BODY)
        web_app.router.add_post(self.settings.http_path, events)
        runner = web.AppRunner(web_app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.http_listen, self.settings.http_port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._http = runner


def _raise_if_token_dead(channel: str, which: str, variable: str, exc: BaseException) -> None:
    """ConfigError (the channel stops, not retried: retrying cannot help) when Slack says the
    token is revoked, expired or of an account or app that is gone."""
    error = slack_error(exc)
    if error in DEAD_TOKEN_ERRORS:
        raise ConfigError(
            f"{channel}: Slack refused the {which} ({error}): it was revoked, expired or "
            f"belongs to an app or account that is gone. Put a valid token in ${variable} "
            "and restart Atlas"
        ) from exc


SOCKET_TASKS = ("message_processor", "message_receiver", "current_session_monitor")


def _ended_task(client: Any) -> object:
    """The client itself if it was closed behind our back, or the first of the tasks it needs
    to read events that has ended (it restarts none of them by itself); else None."""
    if client.closed:
        return client
    for part in SOCKET_TASKS:
        task = getattr(client, part, None)
        if task is not None and task.done():
            return task
    return None


def _raise_dead(client: Any, ended: Any) -> None:
    if ended is client:
        raise SocketModeDied("slack_sdk closed its Socket Mode client")
    part = next(part for part in SOCKET_TASKS if getattr(client, part, None) is ended)
    if ended.cancelled():
        raise SocketModeDied(f"slack_sdk's Socket Mode {part} was cancelled")
    error = ended.exception()
    raise SocketModeDied(f"slack_sdk's Socket Mode {part} ended ({error!r})") from error


__all__ = ["PendingAsk", "SlackChannel", "create_channel", "slack_channel"]
