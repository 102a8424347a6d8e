"""What reaches the Telegram channel: updates by long polling or the webhook, each handled once;
messages (with their files) turned into turns for the dispatcher under their conversation key;
and the commands /new, /status, /help.

Conversation keys: a direct chat is one conversation; in a group each person has their own
(`Address.user`) unless `group_shared`; a forum topic is one conversation (`Address.thread`).
`/new` bumps a generation kept in atlas.db, and the chat key becomes `<chat id>#<generation>`,
so the old conversation stays stored and searchable while the next message starts afresh.
"""

from __future__ import annotations

import asyncio
import logging
import secrets as random_tokens
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from atlas.channels.base import Address
from atlas.channels.chat_common import NEW_CONVERSATION, ChatGenerations, platform_chat
from atlas.channels.inbox import FileTooLarge, check_size, name_files, save_stream
from atlas.channels.send_errors import SendError
from atlas.channels.store_faults import HELD_PAUSE_MAX, store_cannot_write
from atlas.channels.supervisor import ChannelHealth
from atlas.channels.telegram.asking import TelegramAsking
from atlas.channels.telegram.errors import describe
from atlas.channels.telegram.sending import target
from atlas.errors import AtlasError
from atlas.home import Bot

if TYPE_CHECKING:
    from aiogram.types import Message, Update, User

    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

UPDATE_KINDS = ["message", "callback_query"]
SEEN_UPDATES = 4096
# A message whose storing failed (a locked store, a worker process being restarted) is left
# unconfirmed and tried again, pausing NOT_STORED_PAUSE seconds times the attempts; after
# NOT_STORED_TRIES it is logged as failed and confirmed (a fault that does not pass). A store
# that cannot write (a full disk) is no such fault: its messages are held as long as it lasts.
NOT_STORED_TRIES = 6
NOT_STORED_PAUSE = 0.5
POLL_RETRY_FIRST = 1.0  # seconds before polling again after a failure; doubles up to a minute
HELP = (
    "Hello! Write to me and I answer. Commands: /new starts a fresh conversation, "
    "/stop cancels what I am doing, /status shows the model and context, /mode sets approvals."
)


def parse_command(text: str, username: str) -> tuple[str, str]:
    """('/cmd', rest) for a command (with any `@thisbot` dropped), else ('', text)."""
    if not text.startswith("/"):
        return "", text
    head, _, rest = text.partition(" ")
    name, _, addressed_to = head.partition("@")
    if addressed_to and addressed_to.lower() != username.lower():
        return "", text  # a command for another bot in the group
    return name.lower(), rest.strip()


class TelegramInbound(TelegramAsking):
    """Updates in, turns out. TelegramChannel sets the state below."""

    bot: Bot
    dispatcher: Dispatcher
    webhook_secret: str | None
    username: str
    bot_id: int
    generations: ChatGenerations
    _seen: OrderedDict[int, None]
    _not_stored: dict[int, int]  # update id -> failed attempts to store its message
    health: ChannelHealth
    _webhook: Any  # aiohttp AppRunner in webhook mode

    # ------------------------------------------------------------ updates

    async def _poll(self) -> None:
        """Long polling until cancelled. Any failure of getUpdates (Telegram's errors, a dropped
        connection, a proxy's HTML 502 page, an answer cut short) is logged and retried, more
        slowly each time; getUpdates is safe to repeat, as unconfirmed updates come again."""
        from aiogram.exceptions import AiogramError, TelegramRetryAfter

        tg = self._connected()
        offset: int | None = None
        delay = POLL_RETRY_FIRST
        while True:
            try:
                updates = await tg.get_updates(
                    offset=offset,
                    timeout=self.settings.poll_timeout,
                    allowed_updates=UPDATE_KINDS,
                    request_timeout=self.settings.poll_timeout + 15,
                )
                delay = POLL_RETRY_FIRST
            except TelegramRetryAfter as exc:
                await asyncio.sleep(exc.retry_after)
                continue
            except AiogramError as exc:
                # Network trouble, Telegram's 5xx, an unreadable answer, a revoked token: keep
                # trying, more slowly (ClientDecodeError is an AiogramError, not an API error).
                log.warning(
                    "%s: getUpdates failed (%s); retrying in %g s",
                    self.name,
                    describe(exc),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
                continue
            if not updates:
                continue
            unstored = await self._handle_batch(updates)
            if unstored is None:
                # The next getUpdates confirms them, and only after they were handled (stored).
                offset = updates[-1].update_id + 1
                continue
            # Not stored (the store locked, a worker process restarting): left unconfirmed
            # from there on, so the next getUpdates brings it again, after a pause (the later
            # ones stored meanwhile come again too, and are dropped as seen).
            offset = unstored
            pause = self._not_stored.get(unstored, 1) * NOT_STORED_PAUSE
            await asyncio.sleep(min(pause, HELD_PAUSE_MAX))

    async def _handle_batch(self, updates: list[Update]) -> int | None:
        """Handle one getUpdates answer: each chat's updates in order, the chats side by side
        (storing a message can take a round trip to another worker process, and a busy bot has
        many chats). The first update id not stored, or None."""
        by_chat: dict[int, list[Update]] = {}
        for update in updates:
            by_chat.setdefault(_chat_of(update), []).append(update)

        async def in_order(chat_updates: list[Update]) -> int | None:
            for update in chat_updates:
                if not await self.handle_update(update):
                    return update.update_id
            return None

        failed = await asyncio.gather(*(in_order(group) for group in by_chat.values()))
        return min((update_id for update_id in failed if update_id is not None), default=None)

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
        if not await self.handle_update(update):  # stored before Telegram hears 200
            return web.Response(status=503)  # not stored: Telegram sends it again later
        return web.Response()

    async def _start_webhook(self) -> None:
        """Serve the webhook (kept in `_webhook` for stop) and tell Telegram where it is."""
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

    async def handle_update(self, update: Update) -> bool:
        """One update from polling or the webhook; a fault is logged, never fatal. False when
        a message failed before it was stored (its handling ends with the store): it must not
        be confirmed, and comes again, up to NOT_STORED_TRIES times."""
        update_id = update.update_id
        if update_id in self._seen:
            log.info("%s: dropped duplicate update %s", self.name, update_id)
            return True
        self._seen[update_id] = None
        while len(self._seen) > SEEN_UPDATES:
            self._seen.popitem(last=False)
        try:
            if update.message is not None:
                await self._on_message(update.message, update_id)
            elif update.callback_query is not None:
                await self._on_callback(update.callback_query)
        except Exception as exc:
            if update.message is not None and (why := store_cannot_write(exc)):
                return self._hold(update_id, why)
            tries = self._not_stored.pop(update_id, 0) + 1
            if update.message is not None and tries < NOT_STORED_TRIES:
                self._not_stored[update_id] = tries
                del self._seen[update_id]  # so that it is handled when it comes again
                log.warning(
                    "%s: update %s not stored yet (%s: %s); it will come again",
                    self.name,
                    update_id,
                    type(exc).__name__,
                    exc,
                )
                return False
            if isinstance(exc, AtlasError):
                log.warning("%s: update %s: %s", self.name, update_id, exc)
            else:
                log.exception("%s: update %s failed", self.name, update_id)
        self._not_stored.pop(update_id, None)
        if self.health.holding:
            self.health.holding = ""
            self.health.up(self.health.current.activity or "polling")
        return True

    def _hold(self, update_id: int, why: str) -> bool:
        """The store cannot write: the message stays unconfirmed (Telegram keeps it and brings
        it again) for as long as that lasts, never dropped; the log and the channel's health
        (the dashboard, doctor) say so."""
        self._not_stored[update_id] = self._not_stored.get(update_id, 0) + 1
        del self._seen[update_id]  # so that it is handled when it comes again
        reason = f"messages held unconfirmed: the store cannot write ({why})"
        if not self.health.holding:
            log.error("%s: update %s: %s; tried again until it can", self.name, update_id, reason)
        self.health.holding = reason
        self.health.reconnecting(reason)
        return False

    # ------------------------------------------------------------ messages

    async def _on_message(self, message: Message, update_id: int) -> None:
        user = message.from_user
        if user is None or user.is_bot:
            return
        text = message.text or message.caption or ""
        command, rest = parse_command(text.strip(), self.username)
        if not command and text.strip():
            words = self._without_mention(text).strip()
            if await self._answer_in_words(message, user, words):
                return
        if message.chat.type != "private":
            if not command and not self._addressed(message, text):
                return
            text = self._without_mention(text)
        if not await self.access.is_allowed(str(user.id)):
            thread_id = message.message_thread_id if message.is_topic_message else None
            private = message.chat.type == "private"
            await self._greet_stranger(user, message.chat.id, thread_id, private=private)
            return
        address = await self.address_for(message)
        if await self._run_command(command, address):
            return
        if command in ("/stop", "/mode"):
            text = f"{command} {rest}".strip()  # as the dispatcher knows them, without @bot
        files, problems = await self._download_files(message)
        for problem in problems:
            await self._say(address, problem)
        if not text.strip() and not files:
            return
        turn_text = name_files(text.strip(), files, self.bot.workspace)
        from atlas.dispatch import Inbound

        await self.dispatcher.submit(
            Inbound(address, turn_text, event_id=f"update:{update_id}", files=tuple(files))
        )

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

    async def _greet_stranger(
        self, user: User, chat_id: int, thread_id: int | None, *, private: bool = True
    ) -> None:
        """The pairing reply to someone not yet allowed. In a group the code goes to them
        privately, never to the group (see atlas/channels/access.py)."""
        log.info("%s: message from unapproved user %s (%s)", self.name, user.id, user.full_name)
        if private:
            reply = await self.access.stranger(
                str(user.id), user_name=user.full_name, chat=str(chat_id)
            )
        else:

            async def send_privately(text: str) -> bool:
                privately = Address(self.bot.name, self.name, str(user.id))
                sent = await self.dispatcher.outbox.send(privately, text, kind="note")
                if sent.state != "delivered":
                    log.info("%s: cannot write privately to %s: %s", self.name, user.id, sent.error)
                return sent.state == "delivered"

            reply = await self.access.group_stranger(
                str(user.id), send_privately, user_name=user.full_name, chat=str(chat_id)
            )
        if reply is None:
            return
        where = Address(self.bot.name, self.name, str(chat_id), str(thread_id or ""))
        await self.dispatcher.outbox.send(where, reply, kind="note")

    async def address_for(self, message: Message) -> Address:
        """The conversation a message belongs to (see the module docstring)."""
        private = message.chat.type == "private"
        thread = str(message.message_thread_id) if message.is_topic_message else ""
        shared = private or bool(thread) or self.settings.group_shared
        user = "" if shared or message.from_user is None else str(message.from_user.id)
        chat = await self.generations.chat_key(str(message.chat.id), thread, user)
        return Address(self.bot.name, self.name, chat, thread, user)

    # ------------------------------------------------------------ commands

    async def _run_command(self, command: str, address: Address) -> bool:
        """/new, /status, /start and /help, answered here; False for anything else."""
        if command == "/new":
            await self.dispatcher.stop_turn_anywhere(address)
            await self.generations.bump(platform_chat(address.chat), address.thread, address.user)
            await self._say(address, NEW_CONVERSATION)
        elif command == "/status":
            await self._say(address, await self._status(address))
        elif command in ("/start", "/help"):
            await self._say(address, HELP)
        else:
            return False
        return True

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
        # A spread bot's conversation may be held by another process than this channel's.
        mode = await self.dispatcher.conversation_mode_anywhere(address, conversation.id)
        pending = self.pending_questions(target(address)[0])
        lines = [
            f"**Model:** {self.bot.model}",
            f"**Context:** about {used:,} of {window:,} tokens ({used / window:.0%}), "
            f"{len(history)} messages",
            f"**Mode:** {mode or self.bot.settings.mode}",
            "**Pending approvals:** " + ("none" if not pending else ""),
            *(f"- {question}" for question in pending),
        ]
        return "\n".join(lines)

    # ------------------------------------------------------------ files

    async def _download_files(self, message: Message) -> tuple[list[Path], list[str]]:
        """Photos, documents, voice notes, audio and video into the inbox; and what went wrong."""
        saved: list[Path] = []
        problems: list[str] = []
        for item, name in _attachments(message):
            try:
                saved.append(await self._download(item.file_id, item.file_size, name))
            except FileTooLarge as exc:
                problems.append(f"I did not keep {name}: {exc}.")
            except (AtlasError, OSError) as exc:
                log.warning("%s: download of %s failed: %s", self.name, name, exc)
                problems.append(f"I could not download {name}: {exc}")
        return saved, problems

    async def _download(self, file_id: str, size: int | None, name: str) -> Path:
        limit = self.settings.inbox_max_bytes
        check_size(size, limit, name)
        tg = self._connected()
        try:
            info = await self.retrying.call("getFile", lambda: tg.get_file(file_id))
        except SendError as exc:
            raise AtlasError(f"Telegram would not give the file: {exc}") from exc
        check_size(info.file_size, limit, name)
        if not info.file_path:
            raise AtlasError("Telegram gave no download path for the file")
        url = tg.session.api.file_url(tg.token, info.file_path)
        return await save_stream(self.bot, name, tg.session.stream_content(url, timeout=120), limit)


def _attachments(message: Message) -> list[tuple[Any, str]]:
    """A message's files (the largest size of a photo) with the names they are saved under."""
    found: list[tuple[Any, str]] = []
    mid = message.message_id
    if message.photo:
        found.append((message.photo[-1], f"photo-{mid}.jpg"))
    if message.document:
        found.append((message.document, message.document.file_name or f"document-{mid}"))
    if message.voice:
        found.append((message.voice, f"voice-{mid}.ogg"))
    if message.audio:
        found.append((message.audio, message.audio.file_name or f"audio-{mid}.mp3"))
    if message.video:
        found.append((message.video, message.video.file_name or f"video-{mid}.mp4"))
    return found


__all__ = ["HELP", "UPDATE_KINDS", "TelegramInbound", "parse_command"]


def _chat_of(update: Update) -> int:
    """The chat an update belongs to (0 for kinds with none): its updates keep their order."""
    if update.message is not None:
        return update.message.chat.id
    query = update.callback_query
    if query is not None and query.message is not None:
        return query.message.chat.id
    return 0
