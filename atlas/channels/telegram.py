"""Telegram (aiogram 3): long polling (or a webhook), DMs, groups, forum topics, files in,
approvals with inline buttons, commands.

Conversation keys: a direct chat is one conversation; in a group each person has their own
(`Address.user`) unless `group_shared`; a forum topic is one conversation (`Address.thread`).
`/new` bumps a generation kept in atlas.db, and the chat key becomes `<chat id>#<generation>`,
so the old conversation stays stored and searchable while the next message starts afresh.

Updates are handled one at a time and each is stored (Dispatcher.submit) before the next
getUpdates confirms it, so a crash never loses a message; an update id seen before is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import secrets as random_tokens
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from atlas.channels.access import Access
from atlas.channels.base import Address, Answer, Question, QuestionOutcome
from atlas.channels.inbox import FileTooLarge, check_size, name_files, save_stream
from atlas.channels.manager import channel_name
from atlas.channels.questions import (
    CANCEL,
    CHOOSE,
    OTHER_TEXT,
    describe_answer,
    parse_action,
)
from atlas.channels.settings import TelegramSettings, channel_settings, secret
from atlas.channels.telegram_delivery import (
    SELF_HOSTED_UPLOAD_LIMIT,
    UPLOAD_LIMIT,
    Chunk,
    DeliveryError,
    Retrying,
    send_chunk,
    telegram_chunks,
    unsendable,
)
from atlas.channels.telegram_questions import (
    CALLBACK_KIND,
    TelegramQuestionSet,
    answered_html,
    awaiting_html,
    closed_html,
    keyboard,
    question_html,
    question_plain,
)
from atlas.errors import AtlasError, ConfigError
from atlas.home import Bot
from atlas.providers.base import ToolCall

if TYPE_CHECKING:
    from aiogram import Bot as TelegramBot
    from aiogram.types import CallbackQuery, Message, Update, User

    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

PLATFORM = "telegram"
UPDATE_KINDS = ["message", "callback_query"]
TYPING_EVERY = 4.0  # Telegram shows "typing…" for about five seconds
TYPING_LIMIT = 600.0  # a turn that never replies must not type forever
SEEN_UPDATES = 4096
QUESTION_LIMIT = 3500
HELP = (
    "Hello! Write to me and I answer. Commands: /new starts a fresh conversation, "
    "/stop cancels what I am doing, /status shows the model and context, /mode sets approvals."
)


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


@dataclass
class PendingAsk:
    question: str
    choices: list[str]
    chat_id: int
    message_id: int
    future: asyncio.Future[str | None]


def target(address: Address) -> tuple[int, int | None]:
    """The Telegram chat id and forum topic id an address points at."""
    chat_id = int(address.chat.split("#", 1)[0])
    return chat_id, int(address.thread) if address.thread else None


def _command(text: str, username: str) -> tuple[str, str]:
    """('/cmd', rest) for a command (with any `@thisbot` dropped), else ('', text)."""
    if not text.startswith("/"):
        return "", text
    head, _, rest = text.partition(" ")
    name, _, addressed_to = head.partition("@")
    if addressed_to and addressed_to.lower() != username.lower():
        return "", text  # a command for another bot in the group
    return name.lower(), rest.strip()


class TelegramChannel:
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
        limits = runtime.home.settings.limits
        self.retrying = Retrying(
            base_delay=limits.retry_base_delay, max_delay=limits.retry_max_delay
        )
        self.tg: TelegramBot | None = None
        self.username = ""
        self.bot_id = 0
        self._poller: asyncio.Task[None] | None = None
        self._webhook: Any = None  # aiohttp AppRunner in webhook mode
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._typing: dict[Address, asyncio.Task[None]] = {}
        self._asks: dict[str, PendingAsk] = {}
        self._question_sets: dict[str, TelegramQuestionSet] = {}
        # (chat id, user id) → (request id, question): who tapped Other and owes a written answer
        self._awaiting_text: dict[tuple[int, int], tuple[str, int]] = {}
        self._undelivered: dict[int, list[str]] = {}
        self._generations: dict[tuple[str, str, str], int] = {}
        self._background: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        from aiogram import Bot as TelegramBot
        from aiogram.client.session.aiohttp import AiohttpSession
        from aiogram.client.telegram import PRODUCTION, TelegramAPIServer
        from aiogram.exceptions import TelegramAPIError
        from aiogram.utils.token import TokenValidationError

        from atlas.channels.telegram_models import pin_response_models

        pin_response_models()  # aiogram would rebuild a pydantic model per API call otherwise
        api = (
            TelegramAPIServer.from_base(self.settings.api_base)
            if self.settings.api_base
            else PRODUCTION
        )
        session = AiohttpSession(api=api)
        try:
            tg = TelegramBot(self.token, session=session)
        except TokenValidationError:
            await session.close()
            raise ConfigError(
                f"{self.bot.root / 'bot.toml'}: the environment variable "
                f"{self.settings.token_env} does not hold a Telegram bot token (123456:ABC…)"
            ) from None
        try:
            me = await tg.get_me()
            if self.settings.mode == "polling":
                await tg.delete_webhook(drop_pending_updates=False)
        except TelegramAPIError as exc:
            await session.close()
            raise AtlasError(f"Telegram for bot {self.bot.name}: {exc}") from exc
        self.tg, self.username, self.bot_id = tg, me.username or "", me.id
        if self.settings.mode == "polling":
            self._poller = asyncio.create_task(self._poll(), name=f"{self.name} polling")
        else:
            await self._start_webhook()
        log.info("%s: connected as @%s (%s)", self.name, self.username, self.settings.mode)

    async def stop(self) -> None:
        if self._poller:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        for task in [*self._typing.values(), *self._background]:
            task.cancel()
        await asyncio.gather(*self._typing.values(), *self._background, return_exceptions=True)
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
            await self.tg.session.close()
            self.tg = None

    def _connected(self) -> TelegramBot:
        if self.tg is None:
            raise DeliveryError(f"{self.name} is not connected to Telegram")
        return self.tg

    # ------------------------------------------------------------ receiving

    async def _poll(self) -> None:
        from aiogram.exceptions import TelegramAPIError, TelegramRetryAfter

        tg = self._connected()
        offset: int | None = None
        delay = 1.0
        while True:
            try:
                updates = await tg.get_updates(
                    offset=offset,
                    timeout=self.settings.poll_timeout,
                    allowed_updates=UPDATE_KINDS,
                    request_timeout=self.settings.poll_timeout + 15,
                )
                delay = 1.0
            except TelegramRetryAfter as exc:
                await asyncio.sleep(exc.retry_after)
                continue
            except TelegramAPIError as exc:
                # Network trouble, Telegram's 5xx, a revoked token: keep trying, more slowly.
                log.warning("%s: getUpdates failed (%s); retrying in %.0f s", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
                continue
            for update in updates:
                # The next getUpdates confirms it, and only after it was handled (stored).
                offset = update.update_id + 1
                await self.handle_update(update)

    async def handle_update(self, update: Update) -> None:
        """One update from polling or the webhook; a fault is logged, never fatal."""
        if update.update_id in self._seen:
            log.info("%s: dropped duplicate update %s", self.name, update.update_id)
            return
        self._seen[update.update_id] = None
        while len(self._seen) > SEEN_UPDATES:
            self._seen.popitem(last=False)
        try:
            if update.message is not None:
                await self._on_message(update.message, update.update_id)
            elif update.callback_query is not None:
                await self._on_callback(update.callback_query)
        except AtlasError as exc:
            log.warning("%s: update %s: %s", self.name, update.update_id, exc)
        except Exception:
            log.exception("%s: update %s failed", self.name, update.update_id)

    def _addressed(self, message: Message, text: str) -> bool:
        """In a group: is the bot mentioned, replied to, or configured to hear everything?"""
        if self.settings.groups == "all":
            return True
        reply = message.reply_to_message
        if reply is not None and reply.from_user is not None and reply.from_user.id == self.bot_id:
            return True
        return bool(self.username) and f"@{self.username.lower()}" in text.lower()

    def _without_mention(self, text: str) -> str:
        mention = f"@{self.username}"
        at = text.lower().find(mention.lower())
        if at < 0 or not self.username:
            return text
        return (text[:at] + text[at + len(mention) :]).strip()

    async def _on_message(self, message: Message, update_id: int) -> None:
        user = message.from_user
        if user is None or user.is_bot:
            return
        text = message.text or message.caption or ""
        command, rest = _command(text.strip(), self.username)
        if not command and text.strip() and await self._answer_in_words(message, user, text):
            return
        if message.chat.type != "private":
            if not command and not self._addressed(message, text):
                return
            text = self._without_mention(text)
        chat_id = message.chat.id
        thread_id = message.message_thread_id if message.is_topic_message else None
        if not await self.access.is_allowed(str(user.id)):
            await self._greet_stranger(user, chat_id, thread_id)
            return
        address = await self.address_for(message)
        if command == "/new":
            await self._start_new(address)
            return
        if command == "/status":
            await self.send(address, await self._status(address))
            return
        if command in ("/start", "/help"):
            await self.send(address, HELP)
            return
        if command in ("/stop", "/mode"):
            text = f"{command} {rest}".strip()  # as the dispatcher knows them, without @bot
        files, problems = await self._download_files(message)
        for problem in problems:
            await self.send(address, problem)
        if not text.strip() and not files:
            return
        turn_text = name_files(text.strip(), files, self.bot.workspace)
        from atlas.dispatch import Inbound

        await self.dispatcher.submit(
            Inbound(address, turn_text, event_id=f"update:{update_id}", files=tuple(files))
        )

    async def _greet_stranger(self, user: User, chat_id: int, thread_id: int | None) -> None:
        reply = await self.access.stranger(
            str(user.id), user_name=user.full_name, chat=str(chat_id)
        )
        log.info("%s: message from unapproved user %s (%s)", self.name, user.id, user.full_name)
        if reply is None:
            return
        await send_chunk(
            self._connected(), self.retrying, chat_id, Chunk(None, reply), thread_id=thread_id
        )

    async def address_for(self, message: Message) -> Address:
        """The conversation a message belongs to (see the module docstring)."""
        private = message.chat.type == "private"
        thread = str(message.message_thread_id) if message.is_topic_message else ""
        shared = private or bool(thread) or self.settings.group_shared
        user = "" if shared or message.from_user is None else str(message.from_user.id)
        chat = str(message.chat.id)
        generation = await self._generation(chat, thread, user)
        if generation:
            chat = f"{chat}#{generation}"
        return Address(self.bot.name, self.name, chat, thread, user)

    async def _generation(self, chat: str, thread: str, user: str) -> int:
        key = (chat, thread, user)
        if key not in self._generations:

            def find(db: Any) -> int:
                rows = db.query(
                    "SELECT generation FROM chat_generations "
                    "WHERE channel = ? AND chat = ? AND thread = ? AND user = ?",
                    [self.name, chat, thread, user],
                )
                row = next(iter(rows), None)
                return int(row["generation"]) if row else 0

            self._generations[key] = await self.access.store.call(find)
        return self._generations[key]

    async def _start_new(self, address: Address) -> None:
        self.dispatcher.stop_turn(address)
        chat = address.chat.split("#", 1)[0]
        generation = await self._generation(chat, address.thread, address.user) + 1
        row = {
            "channel": self.name,
            "chat": chat,
            "thread": address.thread,
            "user": address.user,
            "generation": generation,
        }
        pk = ("channel", "chat", "thread", "user")
        await self.access.store.call(lambda db: db["chat_generations"].upsert(row, pk=pk))
        self._generations[(chat, address.thread, address.user)] = generation
        await self.send(
            address, "Started a new conversation. The earlier one is kept and searchable."
        )

    async def _status(self, address: Address) -> str:
        from atlas.agent.tokens import message_tokens

        runtime = self.dispatcher.runtime
        store = await runtime.store(self.bot)
        conversation = await store.conversation(
            address.channel,
            address.chat,
            thread=address.thread,
            user=address.user,
            bot=self.bot.name,
        )
        history = await store.history(conversation.id)
        used = sum(message_tokens(message) for message in history)
        window = runtime.home.settings.limits.context_window
        state = runtime.state(self.bot, conversation.id)
        chat_id = target(address)[0]
        pending = [p.question for p in self._asks.values() if p.chat_id == chat_id]
        pending += [
            asked.questions[index].text
            for asked in self._question_sets.values()
            if asked.chat_id == chat_id
            for index in asked.open_questions()
        ]
        lines = [
            f"**Model:** {self.bot.model}",
            f"**Context:** about {used:,} of {window:,} tokens ({used / window:.0%}), "
            f"{len(history)} messages",
            f"**Mode:** {state.mode or self.bot.settings.mode}",
            "**Pending approvals:** " + ("none" if not pending else ""),
            *(f"- {question}" for question in pending),
        ]
        return "\n".join(lines)

    async def _download_files(self, message: Message) -> tuple[list[Path], list[str]]:
        """Photos, documents, voice notes, audio and video into the inbox; and what went wrong."""
        found: list[tuple[Any, str]] = []
        mid = message.message_id
        if message.photo:
            found.append((message.photo[-1], f"photo-{mid}.jpg"))  # the largest size
        if message.document:
            found.append((message.document, message.document.file_name or f"document-{mid}"))
        if message.voice:
            found.append((message.voice, f"voice-{mid}.ogg"))
        if message.audio:
            found.append((message.audio, message.audio.file_name or f"audio-{mid}.mp3"))
        if message.video:
            found.append((message.video, message.video.file_name or f"video-{mid}.mp4"))
        saved: list[Path] = []
        problems: list[str] = []
        for item, name in found:
            try:
                saved.append(await self._download(item.file_id, item.file_size, name))
            except FileTooLarge as exc:
                problems.append(f"I did not keep {name}: {exc}.")
            except (AtlasError, OSError) as exc:
                log.warning("%s: download of %s failed: %s", self.name, name, exc)
                problems.append(f"I could not download {name}: {exc}")
        return saved, problems

    async def _download(self, file_id: str, size: int | None, name: str) -> Path:
        from aiogram.exceptions import TelegramAPIError

        limit = self.settings.inbox_max_bytes
        check_size(size, limit, name)
        tg = self._connected()
        try:
            info = await self.retrying.call("getFile", lambda: tg.get_file(file_id))
        except TelegramAPIError as exc:
            raise AtlasError(f"Telegram would not give the file: {exc}") from exc
        check_size(info.file_size, limit, name)
        if not info.file_path:
            raise AtlasError("Telegram gave no download path for the file")
        url = tg.session.api.file_url(tg.token, info.file_path)
        return await save_stream(self.bot, name, tg.session.stream_content(url, timeout=120), limit)

    async def _on_callback(self, query: CallbackQuery) -> None:
        tg = self._connected()
        kind, _, rest = (query.data or "").partition(":")
        if kind == CALLBACK_KIND:
            await self._on_question_tap(query, rest)
            return
        request_id, _, index = rest.partition(":")
        pending = self._asks.get(request_id) if kind == "ask" else None
        if pending is None or pending.future.done():
            await self._answer_callback(query.id, "This question is already closed.")
            return
        if not await self.access.is_allowed(str(query.from_user.id)):
            await self._answer_callback(query.id, "Only people this bot serves can answer.")
            return
        if not index.isdigit() or int(index) >= len(pending.choices):
            await self._answer_callback(query.id, "That is not one of the choices.")
            return
        choice = pending.choices[int(index)]
        pending.future.set_result(choice)
        who = query.from_user.full_name or str(query.from_user.id)
        await self._answer_callback(query.id, choice)
        answered = f"{html.escape(pending.question)}\n\n→ <b>{html.escape(choice)}</b> ({html.escape(who)})"
        await self._edit(tg, pending, answered)

    async def _answer_callback(self, query_id: str, text: str) -> None:
        tg = self._connected()
        try:
            await self.retrying.call(
                "answerCallbackQuery", lambda: tg.answer_callback_query(query_id, text=text)
            )
        except AtlasError as exc:
            log.warning("%s: could not answer a button tap: %s", self.name, exc)

    async def _edit(self, tg: TelegramBot, pending: PendingAsk, text: str) -> None:
        await self._edit_text(pending.chat_id, pending.message_id, text)

    async def _edit_text(
        self, chat_id: int, message_id: int, text: str, reply_markup: Any = None
    ) -> None:
        """Edit a question's message (no reply_markup: its buttons go); a failure is logged."""
        from aiogram.exceptions import TelegramBadRequest

        if self.tg is None:
            return
        tg = self.tg
        try:
            await self.retrying.call(
                "editMessageText",
                lambda: tg.edit_message_text(
                    text,
                    chat_id=chat_id,
                    message_id=message_id,
                    parse_mode="HTML",
                    reply_markup=reply_markup,
                ),
            )
        except (AtlasError, TelegramBadRequest) as exc:
            log.warning("%s: could not edit the question message: %s", self.name, exc)

    async def _start_webhook(self) -> None:
        from aiohttp import web

        path = urlparse(self.settings.webhook_url or "").path or "/"
        app = web.Application()
        app.router.add_post(path, self._on_webhook)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, self.settings.webhook_listen, self.settings.webhook_port).start()
        self._webhook = runner
        tg = self._connected()
        await self.retrying.call(
            "setWebhook",
            lambda: tg.set_webhook(
                self.settings.webhook_url or "",
                secret_token=self.webhook_secret,
                allowed_updates=UPDATE_KINDS,
            ),
        )

    async def _on_webhook(self, request: Any) -> Any:
        from aiogram.types import Update
        from aiohttp import web

        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not self.webhook_secret or not random_tokens.compare_digest(given, self.webhook_secret):
            log.warning("%s: refused a webhook call without the right secret", self.name)
            return web.Response(status=401)
        try:
            update = Update.model_validate(await request.json(), context={"bot": self.tg})
        except ValueError as exc:  # not JSON, or not an update (pydantic's errors are ValueErrors)
            log.warning("%s: refused a webhook body that is not an update: %s", self.name, exc)
            return web.Response(status=400)
        await self.handle_update(update)  # stored before Telegram hears 200
        return web.Response()

    # ------------------------------------------------------------ sending

    async def typing(self, address: Address) -> None:
        """Show "typing…" now and every few seconds until the reply (or a question) is sent."""
        self._stop_typing(address)
        self._typing[address] = asyncio.create_task(self._keep_typing(address))

    def _stop_typing(self, address: Address) -> None:
        task = self._typing.pop(address, None)
        if task:
            task.cancel()

    async def _keep_typing(self, address: Address) -> None:
        from aiogram.exceptions import TelegramAPIError

        chat_id, thread_id = target(address)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TYPING_LIMIT):
                while self.tg is not None:
                    try:
                        await self.tg.send_chat_action(
                            chat_id, "typing", message_thread_id=thread_id
                        )
                    except TelegramAPIError as exc:
                        log.debug("%s: typing indicator failed: %s", self.name, exc)
                    await asyncio.sleep(TYPING_EVERY)

    async def stream(self, address: Address, text: str) -> None:
        return None  # chat platforms get the whole reply at the end

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        return None

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        """The reply in chunks, each retried on its own, then its files as documents. What
        cannot be sent is kept, logged, and offered again at the next successful contact with
        that chat; a file that cannot be sent is named in the reply with the reason."""
        self._stop_typing(address)
        chat_id, thread_id = target(address)
        sendable, refused = await asyncio.to_thread(self._check_files, files or [])
        if refused:
            text = f"{text}\n\n" + "\n".join(refused) if text.strip() else "\n".join(refused)
        backlog = self._undelivered.pop(chat_id, [])
        if backlog:
            earlier = "\n\n".join(backlog)
            text = f"_(An earlier reply could not be delivered; here it is:)_\n\n{earlier}\n\n---\n\n{text}"
        chunks = telegram_chunks(text) if text.strip() else []
        for index, chunk in enumerate(chunks):
            try:
                await send_chunk(
                    self._connected(), self.retrying, chat_id, chunk, thread_id=thread_id
                )
            except DeliveryError as exc:
                kept = "\n\n".join(c.plain for c in chunks[index:])
                if sendable:
                    names = ", ".join(path.name for path in sendable)
                    kept += f"\n\n(Not sent with it: {names}.)"
                self._undelivered.setdefault(chat_id, []).append(kept)
                log.error(
                    "%s: reply to chat %s kept undelivered (%d chars): %s",
                    self.name,
                    chat_id,
                    len(kept),
                    exc,
                )
                raise
        failed = []
        for path in sendable:
            try:
                await self._send_file(chat_id, thread_id, path)
            except DeliveryError as exc:
                log.warning("%s: file %s not sent to chat %s: %s", self.name, path, chat_id, exc)
                failed.append(f"(I could not send the file {path.name}: {exc})")
        if failed:
            await self.send(address, "\n".join(failed))

    def _check_files(self, files: list[Path]) -> tuple[list[Path], list[str]]:
        """The files that can go out, and a line for each that cannot, saying why."""
        limit = SELF_HOSTED_UPLOAD_LIMIT if self.settings.api_base else UPLOAD_LIMIT
        sendable: list[Path] = []
        refused: list[str] = []
        for path in files:
            problem = unsendable(path, limit)
            if problem is None:
                sendable.append(path)
            else:
                log.warning("%s: file %s not sent: %s", self.name, path, problem)
                refused.append(f"(I could not send the file {path.name}: {problem}.)")
        return sendable, refused

    async def _send_file(self, chat_id: int, thread_id: int | None, path: Path) -> None:
        """One file as a document, retried like a chunk; DeliveryError says why it did not go."""
        from aiogram.exceptions import TelegramAPIError
        from aiogram.types import FSInputFile

        tg = self._connected()
        try:
            await self.retrying.call(
                "sendDocument",
                lambda: tg.send_document(chat_id, FSInputFile(path), message_thread_id=thread_id),
            )
        except TelegramAPIError as exc:  # refused (400, 403) or too large (413)
            raise DeliveryError(f"Telegram refused it ({exc})") from exc
        except OSError as exc:  # removed or unreadable since the tool attached it
            raise DeliveryError(f"it could not be read ({exc.strerror or exc})") from exc

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Put a question with one inline button per choice; the first allowed tap answers.
        None when it could not be delivered or the channel stops; cancellation (a timeout)
        edits the message to say nobody answered."""
        from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

        self._stop_typing(address)
        chat_id, thread_id = target(address)
        request_id = random_tokens.token_hex(6)
        keyboard = InlineKeyboardMarkup(
            inline_keyboard=[
                [InlineKeyboardButton(text=choice[:60], callback_data=f"ask:{request_id}:{index}")]
                for index, choice in enumerate(choices)
            ]
        )
        shown = question[:QUESTION_LIMIT]
        try:
            message_id = await send_chunk(
                self._connected(),
                self.retrying,
                chat_id,
                Chunk(html.escape(shown), shown),
                thread_id=thread_id,
                reply_markup=keyboard,
            )
        except DeliveryError as exc:
            log.warning("%s: could not put a question to %s: %s", self.name, address, exc)
            return None
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        pending = PendingAsk(shown, choices, chat_id, message_id, future)
        self._asks[request_id] = pending
        try:
            answer = await future
        except asyncio.CancelledError:
            if self.tg is not None:
                closed = f"{html.escape(shown)}\n\n→ <i>no answer in time</i>"
                task = asyncio.create_task(self._edit(self.tg, pending, closed))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            raise
        finally:
            self._asks.pop(request_id, None)
        if answer is not None:
            await self.typing(address)  # the turn goes on
        return answer

    # ------------------------------------------------------------ ask_user's questions

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        """Each question as a message with its own keyboard; submitted once every question has
        an allowed person's answer. Undelivered when a question cannot be sent; a cancelled
        wait (a timeout) edits the open questions to say nobody answered."""
        self._stop_typing(address)
        chat_id, thread_id = target(address)
        asked = TelegramQuestionSet(random_tokens.token_hex(6), questions, chat_id)
        self._question_sets[asked.request_id] = asked
        try:
            for index in range(len(questions)):
                chunk = Chunk(question_html(asked, index), question_plain(asked, index))
                try:
                    message_id = await send_chunk(
                        self._connected(),
                        self.retrying,
                        chat_id,
                        chunk,
                        thread_id=thread_id,
                        reply_markup=keyboard(asked, index),
                    )
                except DeliveryError as exc:
                    log.warning("%s: could not put questions to %s: %s", self.name, address, exc)
                    asked.cancel("undelivered")
                    await self._close_questions(asked, "could not be delivered")
                    return QuestionOutcome("undelivered", detail=str(exc))
                asked.message_ids.append(message_id)
            outcome = await asked.outcome
        except asyncio.CancelledError:
            self._keep_background(self._close_questions(asked, "no answer in time"))
            raise
        finally:
            self._question_sets.pop(asked.request_id, None)
            self._forget_awaiting(asked.request_id)
        if outcome.status == "cancelled":
            await self._close_questions(asked, outcome.detail or "cancelled")
        if outcome.status == "submitted":
            await self.typing(address)  # the turn goes on
        return outcome

    async def _on_question_tap(self, query: CallbackQuery, key: str) -> None:
        action = parse_action(key)
        asked = self._question_sets.get(action.request_id) if action else None
        if action is None or asked is None or not asked.is_open(action.question):
            await self._answer_callback(query.id, "This question is already closed.")
            return
        if not await self.access.is_allowed(str(query.from_user.id)):
            await self._answer_callback(query.id, "Only people this bot serves can answer.")
            return
        who = query.from_user.full_name or str(query.from_user.id)
        index = action.question
        if action.action == CANCEL:
            asked.cancel(f"cancelled by {who}")
            await self._answer_callback(query.id, "Cancelled.")
            return
        if action.action == OTHER_TEXT:
            self._awaiting_text[(asked.chat_id, query.from_user.id)] = (asked.request_id, index)
            await self._answer_callback(query.id, "Send your answer as a message.")
            await self._edit_question(
                asked, index, awaiting_html(asked, index, who), keyboard(asked, index)
            )
            return
        if action.action == CHOOSE:
            if not asked.valid_choice(index, action.choice):
                await self._answer_callback(query.id, "That is not one of the choices.")
                return
            if asked.questions[index].multi_select:
                asked.toggle(index, action.choice)
                await self._answer_callback(query.id, asked.questions[index].choices[action.choice])
                await self._edit_question(
                    asked, index, question_html(asked, index), keyboard(asked, index)
                )
                return
            answer = asked.choose(index, action.choice, who)
        else:
            found = asked.done(index, who)
            if found is None:
                await self._answer_callback(query.id, "Tap a choice first, or Other….")
                return
            answer = found
        await self._answer_callback(query.id, describe_answer(answer)[:200])
        await self._show_answer(asked, index, answer)

    async def _answer_in_words(self, message: Message, user: User, text: str) -> bool:
        """A written answer to a question whose Other… this person tapped here; True if so."""
        waiting = self._awaiting_text.pop((message.chat.id, user.id), None)
        if waiting is None:
            return False
        request_id, index = waiting
        asked = self._question_sets.get(request_id)
        words = self._without_mention(text).strip()
        if asked is None or not asked.is_open(index) or not words:
            return False  # the question closed meanwhile: an ordinary message
        who = user.full_name or str(user.id)
        await self._show_answer(asked, index, asked.write(index, words, who))
        return True

    async def _show_answer(self, asked: TelegramQuestionSet, index: int, answer: Answer) -> None:
        self._forget_awaiting(asked.request_id, index)
        shown = answered_html(asked, index, describe_answer(answer), answer.by)
        await self._edit_question(asked, index, shown)

    async def _edit_question(
        self, asked: TelegramQuestionSet, index: int, text: str, reply_markup: Any = None
    ) -> None:
        if index < len(asked.message_ids):  # a tap can outrun the send's own bookkeeping
            await self._edit_text(asked.chat_id, asked.message_ids[index], text, reply_markup)

    async def _close_questions(self, asked: TelegramQuestionSet, note: str) -> None:
        """Every unanswered question's message says how the wait ended; its buttons go."""
        for index in asked.open_questions():
            await self._edit_question(asked, index, closed_html(asked, index, note))

    def _forget_awaiting(self, request_id: str, index: int | None = None) -> None:
        for key, (waiting_for, question) in list(self._awaiting_text.items()):
            if waiting_for == request_id and index in (None, question):
                del self._awaiting_text[key]

    def _keep_background(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


__all__ = ["TelegramChannel", "create_channel", "target"]
