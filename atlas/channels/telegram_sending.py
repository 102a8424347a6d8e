"""What the Telegram channel sends: replies in chunks (kept when undeliverable, never sent twice
when they may have arrived), files as documents, the "typing…" indicator, and edits of the
messages that carry buttons."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.channels.chat_common import BackgroundTasks, platform_chat, sort_attached
from atlas.channels.send_errors import MAYBE_LOST, MaybeDelivered, SendError
from atlas.channels.settings import TelegramSettings
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
from atlas.errors import AtlasError
from atlas.providers.base import ToolCall

if TYPE_CHECKING:
    from aiogram import Bot as TelegramBot

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows "typing…" for about five seconds
TYPING_LIMIT = 600.0  # a turn that never replies must not type forever
EARLIER_REPLY = "_(An earlier reply could not be delivered; here it is:)_"


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
    _undelivered: dict[Address, list[str]]  # replies kept through an outage, sent next time
    _background: BackgroundTasks

    def _connected(self) -> TelegramBot:
        if self.tg is None:
            raise DeliveryError(f"{self.name} is not connected to Telegram")
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

    def holds_undelivered(self, address: Address) -> bool:
        """Whether a reply to this address is kept undelivered: the next send carries it."""
        return bool(self._undelivered.get(address))

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        """The reply in chunks, each retried on its own, then its files as documents. What
        cannot be sent is kept, logged, and sent ahead of the next message to that address;
        a file that cannot be sent is named in the reply with the reason. A chunk that may have
        arrived (MaybeDelivered) is not sent again: the person is told it may be missing."""
        self._stop_typing(address)
        chat_id, thread_id = target(address)
        limit = SELF_HOSTED_UPLOAD_LIMIT if self.settings.api_base else UPLOAD_LIMIT
        sendable, refused = await sort_attached(
            files, lambda path: unsendable(path, limit), self.name
        )
        if refused:
            text = f"{text}\n\n" + "\n".join(refused) if text.strip() else "\n".join(refused)
        backlog = self._undelivered.pop(address, [])
        if backlog:  # an empty text sends only what was kept
            earlier = "\n\n".join(backlog)
            rest = f"\n\n---\n\n{text}" if text.strip() else ""
            text = f"{EARLIER_REPLY}\n\n{earlier}{rest}"
        chunks = telegram_chunks(text) if text.strip() else []
        unsure = False  # a chunk may not have arrived
        for index, chunk in enumerate(chunks):
            try:
                await send_chunk(
                    self._connected(), self.retrying, chat_id, chunk, thread_id=thread_id
                )
            except MaybeDelivered as exc:
                unsure = True
                log.warning(
                    "%s: part %d of %d of a reply to chat %s may not have arrived; not sent "
                    "again: %s",
                    self.name,
                    index + 1,
                    len(chunks),
                    chat_id,
                    exc,
                )
            except DeliveryError as exc:
                kept = "\n\n".join(c.plain for c in chunks[index:])
                if unsure:
                    kept += f"\n\n{MAYBE_LOST}"
                if sendable:
                    names = ", ".join(path.name for path in sendable)
                    kept += f"\n\n(Not sent with it: {names}.)"
                self._undelivered.setdefault(address, []).append(kept)
                log.error(
                    "%s: reply to chat %s kept undelivered (%d chars): %s",
                    self.name,
                    chat_id,
                    len(kept),
                    exc,
                )
                raise
        if unsure:
            await self._tell_maybe_lost(address)
        await self._send_files(address, sendable)

    async def _tell_maybe_lost(self, address: Address) -> None:
        """Say that part of the reply may be missing; if even that fails, it is kept."""
        chat_id, thread_id = target(address)
        try:
            await send_chunk(
                self._connected(),
                self.retrying,
                chat_id,
                Chunk(None, MAYBE_LOST),
                thread_id=thread_id,
            )
        except MaybeDelivered as exc:
            log.warning(
                "%s: the notice to chat %s may not have arrived: %s", self.name, chat_id, exc
            )
        except SendError as exc:
            log.warning("%s: notice to chat %s kept undelivered: %s", self.name, chat_id, exc)
            self._undelivered.setdefault(address, []).append(MAYBE_LOST)

    async def _send_files(self, address: Address, files: list[Path]) -> None:
        """Each file as a document; those that fail are named in a reply of their own."""
        chat_id, thread_id = target(address)
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
            except DeliveryError as exc:
                log.warning("%s: file %s not sent to chat %s: %s", self.name, path, chat_id, exc)
                failed.append(f"(I could not send the file {path.name}: {exc})")
        if failed:
            await self.send(address, "\n".join(failed))

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
            raise DeliveryError(f"it could not be read ({exc.strerror or exc})") from exc

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


__all__ = ["EARLIER_REPLY", "TYPING_EVERY", "TYPING_LIMIT", "TelegramSending", "target"]
