"""Telegram (aiogram 3): long polling (or a webhook), DMs, groups, forum topics, files in,
approvals with inline buttons, commands.

The channel is built in layers, each a module: telegram_sending (replies, files, typing, edits),
telegram_asking (approvals and ask_user's questions), telegram_inbound (updates, messages,
conversation keys, commands); this module wires them to a bot and runs the connection.

Updates are handled one at a time and each is stored (Dispatcher.submit) before the next
getUpdates confirms it, so a crash never loses a message; an update id seen before is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from atlas.channels.access import Access
from atlas.channels.aiogram_import import import_aiogram
from atlas.channels.chat_common import BackgroundTasks, ChatGenerations
from atlas.channels.manager import channel_name
from atlas.channels.settings import TelegramSettings, channel_settings, secret
from atlas.channels.telegram_delivery import Retrying
from atlas.channels.telegram_inbound import TelegramInbound
from atlas.channels.telegram_sending import target
from atlas.channels.telegram_session import release_session, shared_session
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
    streams = False

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
        self.access = Access(runtime.audit, bot.name, PLATFORM, settings.allowed_users)
        self.generations = ChatGenerations(runtime.audit, self.name)
        limits = runtime.home.settings.limits
        self.retrying = Retrying(
            base_delay=limits.retry_base_delay, max_delay=limits.retry_max_delay
        )
        self.tg: TelegramBot | None = None
        self.username = ""
        self.bot_id = 0
        self._poller: asyncio.Task[None] | None = None
        self._webhook = None
        self._seen = OrderedDict()
        self._typing = {}
        self._asks = {}
        self._question_sets = {}
        self._awaiting_text = {}
        self._undelivered = {}
        self._background = BackgroundTasks()

    async def start(self) -> None:
        import_aiogram()  # first: it makes the import itself cheap
        from aiogram.exceptions import TelegramAPIError

        tg = await self._client()
        try:
            me = await tg.get_me()
            if self.settings.mode == "polling":
                await tg.delete_webhook(drop_pending_updates=False)
        except TelegramAPIError as exc:
            await release_session(tg.session)
            raise AtlasError(f"Telegram for bot {self.bot.name}: {exc}") from exc
        self.tg, self.username, self.bot_id = tg, me.username or "", me.id
        if self.settings.mode == "polling":
            self._poller = asyncio.create_task(self._poll(), name=f"{self.name} polling")
        else:
            await self._start_webhook()
        log.info("%s: connected as @%s (%s)", self.name, self.username, self.settings.mode)

    async def _client(self) -> TelegramBot:
        """An aiogram Bot for the token, on Telegram's API or the configured one."""
        from aiogram import Bot as TelegramBot
        from aiogram.utils.token import TokenValidationError

        from atlas.channels.telegram_models import pin_response_models

        pin_response_models()  # aiogram would rebuild a pydantic model per API call otherwise
        session = shared_session(self.settings.api_base)
        try:
            return TelegramBot(self.token, session=session)
        except TokenValidationError:
            await release_session(session)
            raise ConfigError(
                f"{self.bot.root / 'bot.toml'}: the environment variable "
                f"{self.settings.token_env} does not hold a Telegram bot token (123456:ABC…)"
            ) from None

    async def stop(self) -> None:
        if self._poller:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
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


__all__ = ["TelegramChannel", "create_channel", "target"]
