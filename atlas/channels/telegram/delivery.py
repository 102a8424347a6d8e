"""Sending to Telegram reliably: HTML chunks under the limit, a plain-text fallback when Telegram
rejects the markup, and retries on 429 (honouring retry_after), 5xx, answers nobody can read
(a proxy's HTML 502 page) and connections that could not be made.

Each chunk is its own request and is retried on its own, so a failure mid-reply never sends an
earlier chunk again. A connection dropped after a sendMessage went out cannot be told apart
from one dropped before Telegram took it, and Telegram offers no idempotency key: such a chunk
is not sent again (MaybeDelivered), so nothing ever arrives twice. telegram_errors.py says which
failure is which.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from atlas.channels.chat_common import MB
from atlas.channels.chat_common import unsendable as shared_unsendable
from atlas.channels.send_errors import MaybeDelivered, NeverRetry, RetryLater, SendError
from atlas.channels.telegram.errors import classify
from atlas.channels.telegram.text import markdown_to_telegram_html, split_message, utf16_len

if TYPE_CHECKING:
    from aiogram import Bot as TelegramBot

log = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096
# What bots may upload: 50 MB through Telegram's servers, 2,000 MB through a self-hosted one.
UPLOAD_LIMIT = 50 * MB
SELF_HOSTED_UPLOAD_LIMIT = 2000 * MB
T = TypeVar("T")


@dataclass(frozen=True)
class Chunk:
    html: str | None  # None: send as plain text (no markup fitted)
    plain: str


def telegram_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """The reply as chunks whose HTML (and plain text) fit Telegram's limit in UTF-16 units."""
    return _chunks(markdown, limit, limit)


def _chunks(markdown: str, markdown_limit: int, limit: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    for piece in split_message(markdown, markdown_limit, utf16_len):
        html = markdown_to_telegram_html(piece)
        if utf16_len(html) <= limit:
            chunks.append(Chunk(html, piece))
        elif markdown_limit > 256:
            # Markup and escapes made it longer: split this piece finer.
            chunks.extend(_chunks(piece, markdown_limit * 2 // 3, limit))
        else:
            chunks.append(Chunk(None, piece))
    return chunks


@dataclass
class Retrying:
    """Calls to the Bot API with retries; `base_delay` doubles per attempt up to `max_delay`."""

    attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0

    async def call(self, what: str, action: Callable[[], Awaitable[T]]) -> T:
        """`action` (a call of the Bot API method `what`) until it succeeds. Raises RetryLater
        when the attempts run out, NeverRetry when Telegram refuses, MaybeDelivered when a call
        that posts may have posted (it is not repeated); the aiogram error is the cause."""
        delay = self.base_delay
        for attempt in range(1, self.attempts + 1):
            try:
                return await action()
            except Exception as exc:
                verdict = classify(exc, what)
                if verdict is None:
                    raise
                if verdict.kind == "refused":
                    raise NeverRetry(f"Telegram refused {what}: {verdict.reason}") from exc
                if verdict.kind == "maybe":
                    raise MaybeDelivered(
                        f"{what} may or may not have arrived: {verdict.reason}"
                    ) from exc
                if attempt == self.attempts:
                    raise RetryLater(
                        f"{what} failed after {attempt} attempts: {verdict.reason}"
                    ) from exc
                wait = verdict.retry_after
                if wait is None:
                    wait, delay = delay, min(delay * 2, self.max_delay)
            log.info(
                "telegram %s: %s (attempt %d); retrying in %.1f s",
                what,
                verdict.reason,
                attempt,
                wait,
            )
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")


def _is_markup_error(exc: BaseException | None) -> bool:
    text = str(exc).lower()
    return "can't parse entities" in text or "unsupported start tag" in text


async def send_chunk(
    bot: TelegramBot,
    retrying: Retrying,
    chat_id: int,
    chunk: Chunk,
    *,
    thread_id: int | None = None,
    reply_markup: Any = None,
) -> int:
    """Send one chunk (HTML, else plain text); its message id. A SendError when it cannot:
    NeverRetry (refused), RetryLater (retries ran out) or MaybeDelivered (not repeated)."""

    async def send(text: str, parse_mode: str | None) -> int:
        message = await retrying.call(
            "sendMessage",
            lambda: bot.send_message(
                chat_id,
                text,
                parse_mode=parse_mode,
                message_thread_id=thread_id,
                reply_markup=reply_markup,
            ),
        )
        return message.message_id

    if chunk.html is not None:
        try:
            return await send(chunk.html, "HTML")
        except NeverRetry as exc:
            if not _is_markup_error(exc.__cause__):
                raise NeverRetry(f"{exc} (chat {chat_id})") from exc.__cause__
            log.info("telegram rejected the markup (%s); sending plain text", exc.__cause__)
    try:
        return await send(chunk.plain, None)
    except NeverRetry as exc:
        raise NeverRetry(f"{exc} (chat {chat_id})") from exc.__cause__


def unsendable(path: Path, limit: int) -> str | None:
    """Why a file cannot go out to Telegram (missing, not a file, over `limit` bytes), or None."""
    return shared_unsendable(path, limit, "Telegram")


__all__ = [
    "Chunk",
    "SendError",
    "Retrying",
    "SELF_HOSTED_UPLOAD_LIMIT",
    "TELEGRAM_LIMIT",
    "UPLOAD_LIMIT",
    "send_chunk",
    "telegram_chunks",
    "unsendable",
]
