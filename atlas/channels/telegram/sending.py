"""What the Telegram channel sends: an outbox row's reply in chunks (what fails is raised,
classified, for the outbox: atlas/outbox/), files as documents, the "typing…" indicator, and
edits of the messages that carry buttons."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.channels.chat_common import BackgroundTasks, platform_chat, sort_attached
from atlas.channels.send_errors import MaybeDelivered, RetryLater, SendError
from atlas.channels.settings import TelegramSettings
from atlas.channels.telegram.delivery import (
    SELF_HOSTED_UPLOAD_LIMIT,
    UPLOAD_LIMIT,
    Chunk,
    Retrying,
    send_chunk,
    telegram_chunks,
    unsendable,
)
from atlas.errors import AtlasError
from atlas.outbox.notes import RESENT_LABEL
from atlas.providers.base import ToolCall

if TYPE_CHECKING:
    from aiogram import Bot as TelegramBot

    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows "typing…" for about five seconds
# A reply within this long shows no "typing…": the Bot API recommends the action only for a
# reply that takes a noticeable time, and it is one request more per turn (docs/channels.md).
TYPING_AFTER = 1.0
TYPING_LIMIT = 600.0  # a turn that never replies must not type forever


def target(address: Address) -> tuple[int, int | None]:
    """The Telegram chat id and forum topic id an address points at."""
    return int(platform_chat(address.chat)), int(address.thread) if address.thread else None


class TelegramSending:
    """The Bot API calls going out. TelegramChannel sets the state below."""

    name: str
    settings: TelegramSettings
    retrying: Retrying
    tg: TelegramBot | None
    _typing: dict[Address, asyncio.Task[None]]
    _background: BackgroundTasks
    dispatcher: Dispatcher

    async def _say(self, address: Address, text: str) -> None:
        """A line of the channel's own (a command's reply, a file it could not take), sent
        through the outbox like every message."""
        await self.dispatcher.outbox.send(address, text, kind="note")

    def _connected(self) -> TelegramBot:
        if self.tg is None:
            raise SendError(f"{self.name} is not connected to Telegram")
        return self.tg

    # ------------------------------------------------------------ typing

    async def typing(self, address: Address) -> None:
        """Show "typing…" now and every few seconds until the reply (or a question) is sent."""
        self._stop_typing(address)
        self._typing[address] = asyncio.create_task(self._keep_typing(address))

    def _stop_typing(self, address: Address) -> None:
        task = self._typing.pop(address, None)
        if task:
            task.cancel()

    async def _keep_typing(self, address: Address) -> None:
        from aiogram.exceptions import AiogramError

        chat_id, thread_id = target(address)
        await asyncio.sleep(TYPING_AFTER)  # cancelled by a reply sent sooner
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TYPING_LIMIT):
                while self.tg is not None:
                    try:
                        await self.tg.send_chat_action(
                            chat_id, "typing", message_thread_id=thread_id
                        )
                    except AiogramError as exc:  # an HTML 502 page too: it is only a hint
                        log.debug("%s: typing indicator failed: %s", self.name, exc)
                    await asyncio.sleep(TYPING_EVERY)

    async def stream(self, address: Address, text: str) -> None:
        return None  # chat platforms get the whole reply at the end

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        return None

    # ------------------------------------------------------------ replies and files

    async def send(
        self, address: Address, text: str, files: list[Path] | None = None
    ) -> str | None:
        """One outbox row: the text in chunks, each retried on its own (Retrying), then its
        files as documents; the id of the first message posted. A thin adapter: what cannot
        go is raised for the outbox to act on (atlas/outbox/sender.py), never kept here.

        - RetryLater when a chunk could not go; after earlier chunks went, with `unsent` (the
          rest, and the files) so the outbox resends only that.
        - NeverRetry when Telegram refuses the reply.
        - MaybeDelivered when a chunk may have arrived: with `resend`, that chunk and the rest
          (and the files), labelled, for the outbox to send once more as a row of its own.
        A file that cannot be sent is named in a line of its own after the reply."""
        self._stop_typing(address)
        chat_id, thread_id = target(address)
        limit = SELF_HOSTED_UPLOAD_LIMIT if self.settings.api_base else UPLOAD_LIMIT
        sendable, refused = await sort_attached(
            files, lambda path: unsendable(path, limit), self.name
        )
        if refused:
            text = f"{text}\n\n" + "\n".join(refused) if text.strip() else "\n".join(refused)
        chunks = telegram_chunks(text) if text.strip() else []
        first_id: int | None = None
        for index, chunk in enumerate(chunks):
            try:
                posted = await send_chunk(
                    self._connected(), self.retrying, chat_id, chunk, thread_id=thread_id
                )
            except MaybeDelivered as exc:
                # Telegram cannot tell whether it arrived: this part and the rest go once more
                # as a row of their own, labelled (the outbox never resends a resend).
                log.warning(
                    "%s: part %d of %d of a reply to chat %s may not have arrived; it and the "
                    "rest are sent once more, labelled: %s",
                    self.name,
                    index + 1,
                    len(chunks),
                    chat_id,
                    exc,
                )
                rest = "\n\n".join(c.plain for c in chunks[index:])
                raise MaybeDelivered(
                    str(exc), resend=f"{RESENT_LABEL}\n\n{rest}", resend_files=tuple(sendable)
                ) from exc
            except RetryLater as exc:
                if index == 0:
                    raise
                rest = "\n\n".join(c.plain for c in chunks[index:])
                raise RetryLater(
                    str(exc), after=exc.after, unsent=rest, unsent_files=tuple(sendable)
                ) from exc
            first_id = first_id or posted
        failed = await self._send_files(chat_id, thread_id, sendable)
        if failed:
            await self._send_failures(chat_id, thread_id, failed)
        return str(first_id) if first_id is not None else None

    async def _send_files(
        self, chat_id: int, thread_id: int | None, files: list[Path]
    ) -> list[str]:
        """Each file as a document; a line for each that did not go."""
        failed = []
        for path in files:
            try:
                await self._send_file(chat_id, thread_id, path)
            except MaybeDelivered as exc:
                log.warning(
                    "%s: file %s may not have reached chat %s: %s", self.name, path, chat_id, exc
                )
                failed.append(
                    f"(The connection broke while I was sending the file {path.name}, so it "
                    "may not have reached you. Ask again if it did not.)"
                )
            except SendError as exc:
                log.warning("%s: file %s not sent to chat %s: %s", self.name, path, chat_id, exc)
                failed.append(f"(I could not send the file {path.name}: {exc})")
        return failed

    async def _send_failures(self, chat_id: int, thread_id: int | None, lines: list[str]) -> None:
        """The files that did not go, named; should that fail for an outage, it is what the
        outbox keeps of the row (the reply itself went)."""
        note = "\n".join(lines)
        try:
            await send_chunk(
                self._connected(), self.retrying, chat_id, Chunk(None, note), thread_id=thread_id
            )
        except RetryLater as exc:
            raise RetryLater(str(exc), after=exc.after, unsent=note) from exc
        except SendError as exc:  # refused, or it may have arrived: the reply went
            log.warning("%s: the note on files to chat %s: %s", self.name, chat_id, exc)

    async def _send_file(self, chat_id: int, thread_id: int | None, path: Path) -> None:
        """One file as a document, retried like a chunk; a SendError says why it did not go."""
        from aiogram.types import FSInputFile

        tg = self._connected()
        try:
            await self.retrying.call(
                "sendDocument",
                lambda: tg.send_document(chat_id, FSInputFile(path), message_thread_id=thread_id),
            )
        except OSError as exc:  # removed or unreadable since the tool attached it
            raise SendError(f"it could not be read ({exc.strerror or exc})") from exc

    # ------------------------------------------------------------ buttons' messages

    async def _answer_callback(self, query_id: str, text: str) -> None:
        tg = self._connected()
        try:
            await self.retrying.call(
                "answerCallbackQuery", lambda: tg.answer_callback_query(query_id, text=text)
            )
        except AtlasError as exc:
            log.warning("%s: could not answer a button tap: %s", self.name, exc)

    async def _edit_text(
        self, chat_id: int, message_id: int, text: str, reply_markup: Any = None
    ) -> None:
        """Edit a question's message (no reply_markup: its buttons go); a failure is logged."""
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
        except AtlasError as exc:
            if "message is not modified" in str(exc.__cause__):
                return  # an earlier attempt made the edit; only its answer was lost
            log.warning("%s: could not edit the question message: %s", self.name, exc)


__all__ = ["TYPING_AFTER", "TYPING_EVERY", "TYPING_LIMIT", "TelegramSending", "target"]
