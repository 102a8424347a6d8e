"""What an aiogram error means for a Bot API call: retry it, give up, or it may have been done.

aiogram raises TelegramAPIError subclasses for Telegram's own JSON answers and for network
failures, but `ClientDecodeError` (not a TelegramAPIError) for an answer it cannot read: the HTML
502 page of the nginx in front of the Bot API, an empty body, truncated JSON. That error does not
carry the HTTP status, so the session made here (`status_keeping_session`) notes the status on
it (`http_status`), which tells the cases apart:

- an error status (5xx, 408, 429): the server did not act; a server error, retried;
- another 4xx: a proxy refused the request; not retried;
- a 2xx: the server did act, and only its answer was spoiled on the way.

A call is `repeatable` when doing it twice does no harm (getUpdates hands the same updates again
until they are confirmed; answering a tap or editing a message twice changes nothing). For a
call that is not (sendMessage, sendDocument: each call posts a message), a connection dropped or
timed out after the request went out, or a spoiled 2xx answer, means the message may have been
posted: `maybe`, never retried (Telegram takes no idempotency key).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # aiogram is imported late, through atlas/channels/telegram/aiogram_import.py
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.exceptions import ClientDecodeError

# Calls that post something each time they are made; any other call is safe to repeat.
NOT_REPEATABLE = frozenset(
    {
        "sendMessage",
        "sendDocument",
        "sendPhoto",
        "sendAudio",
        "sendVoice",
        "sendVideo",
        "sendMediaGroup",
        "copyMessage",
        "forwardMessage",
    }
)

Kind = Literal["retry", "refused", "maybe"]


def status_keeping_session(**options: Any) -> AiohttpSession:
    """aiogram's aiohttp session (with these options), whose ClientDecodeErrors carry the
    HTTP status of the answer that could not be read, as `http_status`; closed without
    aiogram's quarter-second wait when its server speaks plain HTTP (nothing TLS to end)."""
    return _status_keeping_class()(**options)


@functools.cache
def _status_keeping_class() -> type[AiohttpSession]:
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.exceptions import ClientDecodeError

    class StatusKeepingSession(AiohttpSession):
        def check_response(self, bot: Any, method: Any, status_code: int, content: str) -> Any:
            try:
                return super().check_response(
                    bot=bot, method=method, status_code=status_code, content=content
                )
            except ClientDecodeError as exc:
                exc.http_status = status_code  # type: ignore[attr-defined]
                raise

        async def close(self) -> None:
            # aiogram sleeps 250 ms after closing, for TLS connections to shut down cleanly
            # (aiohttp's advice); a Bot API server on plain HTTP (a local one) leaves none.
            if not self.api.base.startswith("http://"):
                await super().close()
            elif self._session is not None and not self._session.closed:
                await self._session.close()

    return StatusKeepingSession


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    reason: str
    retry_after: float | None = None  # Telegram asked to wait this long


def classify(exc: BaseException, method: str) -> Verdict | None:
    """What `exc` from a call of `method` means; None when it is not aiogram's error."""
    from aiogram.exceptions import (
        AiogramError,
        ClientDecodeError,
        TelegramAPIError,
        TelegramEntityTooLarge,
        TelegramNetworkError,
        TelegramRetryAfter,
        TelegramServerError,
    )

    repeatable = method not in NOT_REPEATABLE
    if isinstance(exc, TelegramEntityTooLarge):  # a 413 stays a 413 (a TelegramNetworkError)
        return Verdict("refused", f"too large: {exc.message}")
    if isinstance(exc, TelegramRetryAfter):
        return Verdict("retry", f"rate limited for {exc.retry_after} s", float(exc.retry_after))
    if isinstance(exc, TelegramServerError):
        return Verdict("retry", f"server error: {exc.message}")
    if isinstance(exc, TelegramNetworkError):
        if not_sent(exc.__cause__) or repeatable:
            return Verdict("retry", f"network: {exc.message}")
        return Verdict("maybe", f"connection lost after the request went out ({exc.message})")
    if isinstance(exc, TelegramAPIError):  # Telegram's 4xx: bad request, forbidden, ...
        return Verdict("refused", exc.message)
    if isinstance(exc, ClientDecodeError):
        return _undecodable(exc, repeatable)
    if isinstance(exc, AiogramError):  # not a definite refusal: treated as a server error
        return Verdict("retry", f"{type(exc).__name__}: {exc}")
    return None


def _undecodable(exc: ClientDecodeError, repeatable: bool) -> Verdict:
    status: int | None = getattr(exc, "http_status", None)
    reason = f"an answer that is not the Bot API's ({describe_status(status)}: {_start(exc.data)})"
    if status is None or status in (408, 429) or status >= 500:
        return Verdict("retry", reason)
    if 200 <= status < 300:
        return Verdict("retry" if repeatable else "maybe", reason)
    if 400 <= status < 500:
        return Verdict("refused", reason)
    return Verdict("retry", reason)


def not_sent(cause: BaseException | None) -> bool:
    """Whether a network failure happened before the request could reach the server."""
    import aiohttp

    # Refused, unresolvable, a TLS failure, or no connection within the connect timeout.
    return isinstance(cause, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)


def describe(exc: BaseException) -> str:
    """A short account of an aiogram error for the log (without a whole HTML page)."""
    verdict = classify(exc, "getUpdates")
    return verdict.reason if verdict else f"{type(exc).__name__}: {exc}"


def describe_status(status: int | None) -> str:
    return f"HTTP {status}" if status is not None else "HTTP status unknown"


def _start(data: Any, limit: int = 80) -> str:
    """What the unreadable answer was, in a few words: an HTML page's title, else its start."""
    text = " ".join(str(data).split())
    if not text:
        return "an empty body"
    title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE)
    if title:
        return f"an HTML page, {title.group(1).strip()!r}"
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


__all__ = [
    "NOT_REPEATABLE",
    "Verdict",
    "classify",
    "describe",
    "not_sent",
    "status_keeping_session",
]
