"""Telegram (aiogram 3): long polling (or a webhook), DMs, groups, forum topics, files in,
approvals with inline buttons, commands.

The channel is built in layers, each a module: telegram_sending (replies, files, typing, edits),
telegram_asking (approvals and ask_user's questions), telegram_inbound (updates, messages,
conversation keys, commands); this module wires them to a bot and runs the connection.

Updates are handled one at a time and each is stored (Dispatcher.submit) before the next
getUpdates confirms it, so a crash never loses a message; an update id seen before is dropped.

The poller runs under a Supervisor: if it dies, it is logged and restarted with backoff. Its
health is "polling" while getUpdates answers and "reconnecting since T (why)" from the first
failure (whether the poll loop retries it or the supervisor restarts the loop) until the next
answer; `/status` shows it with the bot's other channels.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from atlas.channels.access import Access
from atlas.channels.base import Address
from atlas.channels.chat_common import BackgroundTasks, ChatGenerations
from atlas.channels.manager import channel_name
from atlas.channels.settings import TelegramSettings, channel_settings, secret
from atlas.channels.supervisor import ChannelHealth, Supervisor, brief, health_lines
from atlas.channels.telegram.aiogram_import import import_aiogram
from atlas.channels.telegram.delivery import Retrying
from atlas.channels.telegram.errors import describe
from atlas.channels.telegram.inbound import TelegramInbound
from atlas.channels.telegram.sending import target
from atlas.channels.telegram.session import release_session, shared_session
from atlas.errors import AtlasError, ConfigError
from atlas.home import Bot

if TYPE_CHECKING:
    from aiogram import Bot as TelegramBot

    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

PLATFORM = "telegram"


def create_channel(bot: Bot, dispatcher: Dispatcher) -> TelegramChannel:
    """The bot's Telegram channel from its bot.toml; ConfigError when settings or secrets lack."""
    settings = channel_settings(bot, PLATFORM, TelegramSettings)
    token = secret(bot, PLATFORM, "token_env", settings.token_env)
    webhook_secret = None
    if settings.mode == "webhook":
        if not settings.webhook_url:
            raise ConfigError(
                f"{bot.root / 'bot.toml'}: channels.telegram.mode is 'webhook' but "
                "channels.telegram.webhook_url is not set (the public https URL Telegram posts to)"
            )
        if not settings.webhook_secret_env:
            raise ConfigError(
                f"{bot.root / 'bot.toml'}: channels.telegram.mode is 'webhook' but "
                "channels.telegram.webhook_secret_env is not set (the environment variable "
                "holding the secret Telegram sends with every update)"
            )
        webhook_secret = secret(bot, PLATFORM, "webhook_secret_env", settings.webhook_secret_env)
    return TelegramChannel(bot, settings, dispatcher, token, webhook_secret=webhook_secret)


class TelegramChannel(TelegramInbound):
    sdk_version = 1  # the channel plugin SDK (atlas/plugins.py); registered in pyproject.toml
    streams = False

    @classmethod
    def create(cls, bot: Bot, dispatcher: Dispatcher) -> TelegramChannel:
        return create_channel(bot, dispatcher)

    @staticmethod
    def import_libraries() -> None:
        """aiogram imported and the models of its answers built, before they are needed: the
        home's process does it once for every worker it forks (atlas/workers/fork.py)."""
        from atlas.channels.telegram.models import pin_response_models

        import_aiogram()
        pin_response_models()

    def __init__(
        self,
        bot: Bot,
        settings: TelegramSettings,
        dispatcher: Dispatcher,
        token: str,
        *,
        webhook_secret: str | None = None,
    ) -> None:
        self.bot = bot
        self.settings = settings
        self.dispatcher = dispatcher
        self.token = token
        self.webhook_secret = webhook_secret
        self.name = channel_name(PLATFORM, bot.name)
        runtime = dispatcher.runtime
        self.access = Access(runtime.engines.pairing, bot.name, PLATFORM, settings.allowed_users)
        self.generations = ChatGenerations(runtime.engines.generations, self.name)
        limits = runtime.home.settings.limits
        self.retrying = Retrying(
            base_delay=limits.retry_base_delay, max_delay=limits.retry_max_delay
        )
        self.tg: TelegramBot | None = None
        self.username = ""
        self.bot_id = 0
        self.health = ChannelHealth(self.name)
        self._poller = Supervisor(
            f"{self.name} polling",
            lambda: self._poll(),  # looked up each run: a restart runs the current method
            self.health,
            first_delay=limits.retry_base_delay,
            max_delay=limits.retry_max_delay,
        )
        self._webhook = None
        self._seen = OrderedDict()
        self._not_stored = {}
        self._typing = {}
        self._asks = {}
        self._question_sets = {}
        self._awaiting_text = {}
        self._background = BackgroundTasks()

    async def start(self) -> None:
        import_aiogram()  # first: it makes the import itself cheap
        # AiogramError covers Telegram's JSON errors and ClientDecodeError: an answer that is
        # not JSON, such as the HTML 502 page of the nginx in front of the Bot API.
        from aiogram.exceptions import AiogramError

        tg = await self._client()
        try:
            me = await tg.get_me()
            if self.settings.mode == "polling":
                await tg.delete_webhook(drop_pending_updates=False)
        except AiogramError as exc:
            await release_session(tg.session)
            raise AtlasError(f"Telegram for bot {self.bot.name}: {describe(exc)}") from exc
        self.tg, self.username, self.bot_id = tg, me.username or "", me.id
        if self.settings.mode == "polling":
            tg.health = self.health  # type: ignore[attr-defined]  # see _health_reporting_bot
            self.health.up("polling")
            self._poller.start()
        else:
            await self._start_webhook()
            self.health.up(f"receiving by webhook ({self.settings.webhook_url})")
        log.info("%s: connected as @%s (%s)", self.name, self.username, self.settings.mode)

    async def _client(self) -> TelegramBot:
        """An aiogram Bot for the token, on Telegram's API or the configured one."""
        from aiogram.utils.token import TokenValidationError

        from atlas.channels.telegram.models import pin_response_models

        pin_response_models()  # aiogram would rebuild a pydantic model per API call otherwise
        session = shared_session(self.settings.api_base)
        try:
            return _health_reporting_bot()(self.token, session=session)
        except TokenValidationError:
            await release_session(session)
            raise ConfigError(
                f"{self.bot.root / 'bot.toml'}: the environment variable "
                f"{self.settings.token_env} does not hold a Telegram bot token (123456:ABC…)"
            ) from None

    async def _status(self, address: Address) -> str:
        """/status, with the health of the bot's channels (this one's and any other's)."""
        status = await super()._status(address)
        lines = health_lines(self.dispatcher.channels, self.bot.name)
        return status + "\n**Channels:**" + "".join(f"\n- {line}" for line in lines)

    async def stop(self) -> None:
        await self._poller.stop()
        typing = list(self._typing.values())
        for task in typing:
            task.cancel()
        await asyncio.gather(*typing, self._background.cancel_all(), return_exceptions=True)
        self._typing.clear()
        for pending in self._asks.values():
            if not pending.future.done():
                pending.future.set_result(None)
        for asked in self._question_sets.values():
            asked.cancel("the Telegram channel stopped")
        if self._webhook is not None:
            await self._webhook.cleanup()
            self._webhook = None
        if self.tg is not None:
            await release_session(self.tg.session)
            self.tg = None


@functools.cache
def _health_reporting_bot() -> type[TelegramBot]:
    """aiogram's Bot, telling the channel's health how each getUpdates went: the poll loop
    retries failures on its own, so this is where a poller that cannot reach Telegram shows."""
    from aiogram import Bot as TelegramBot
    from aiogram.methods import GetUpdates

    class HealthReportingBot(TelegramBot):
        health: ChannelHealth | None = None

        async def __call__(self, method: Any, request_timeout: int | None = None) -> Any:
            if self.health is None or not isinstance(method, GetUpdates):
                return await super().__call__(method, request_timeout)
            try:
                result = await super().__call__(method, request_timeout)
            except Exception as exc:
                self.health.reconnecting(f"getUpdates failed: {brief(exc)}")
                raise
            if not self.health.holding:
                self.health.up("polling")
            return result

    return HealthReportingBot


__all__ = ["TelegramChannel", "create_channel", "target"]
