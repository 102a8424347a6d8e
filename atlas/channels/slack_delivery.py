"""Slack Web API calls that survive 429s, 5xx and dropped connections, never posting twice.

A 429 is retried after its Retry-After. A 5xx or a dropped connection is ambiguous for
`chat.postMessage`: Slack may have posted the message before the answer was lost. Every post
therefore carries its own id in the message metadata, and before posting again we look in the
channel (or thread) for a message with that id; if it is there, the post is done.

Files go up the way slack_sdk's `files_upload_v2` sends them (files.getUploadURLExternal, the
bytes to the URL it returns, files.completeUploadExternal), but step by step: the first two
share nothing and are simply repeated, while the completion, which shares the file, is
ambiguous like a post; before completing again we ask files.info whether the file is already
shared into the channel. (files_upload_v2 as one call could not tell which step failed.)
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from atlas.channels.chat_common import unsendable as shared_unsendable
from atlas.errors import AtlasError

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

METADATA_EVENT = "atlas_reply"
# How many recent messages are searched for a post whose answer was lost.
LOOKBACK = 50
# Slack takes files up to 1 GB.
UPLOAD_LIMIT = 1024 * 1024 * 1024
T = TypeVar("T")


class SlackDeliveryError(AtlasError):
    """A Slack call that failed for good (after retries, or refused by Slack)."""


class SlackSender:
    """Retrying Web API calls for one bot token."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        attempts: int = 5,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
    ) -> None:
        self.client = client
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """A call that is safe to repeat (update, reactions, status): retried on any outage."""

        async def once() -> dict[str, Any]:
            response = await self.client.api_call(method, json=params)
            return dict(response.data)  # type: ignore[arg-type]

        return await self._repeated(method, once)

    async def _repeated(self, what: str, action: Callable[[], Awaitable[T]]) -> T:
        """`action` until it succeeds, retried on 429, 5xx and dropped connections."""
        for attempt in range(1, self.attempts + 1):
            try:
                return await action()
            except Exception as exc:  # classified below; anything else is re-raised
                delay = self._retry_delay(what, exc, attempt)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

    async def upload(self, channel: str, path: Path, *, thread_ts: str | None = None) -> str:
        """Share a file into the channel (and thread) exactly once; returns its file id."""
        data = await asyncio.to_thread(path.read_bytes)

        async def prepare() -> str:
            # A fresh upload URL each time: an unfinished upload is never shared, only dropped.
            slot = await self.client.files_getUploadURLExternal(
                filename=path.name, length=len(data)
            )
            await self._send_bytes(str(slot["upload_url"]), data, path.name)
            return str(slot["file_id"])

        file_id = await self._repeated("files.getUploadURLExternal", prepare)
        complete = "files.completeUploadExternal"
        uncertain = False
        for attempt in range(1, self.attempts + 1):
            try:
                if uncertain:
                    if await self._is_shared(file_id, channel):
                        log.info("slack: file %s reached %s despite the error", path.name, channel)
                        return file_id
                    uncertain = False  # not shared: completing again cannot share it twice
                await self.client.files_completeUploadExternal(
                    files=[{"id": file_id, "title": path.name}],
                    channel_id=channel,
                    thread_ts=thread_ts,
                )
                return file_id
            except Exception as exc:  # classified below; anything else is re-raised
                delay = self._retry_delay(complete, exc, attempt)
                uncertain = uncertain or _maybe_done(exc)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

    async def _send_bytes(self, url: str, data: bytes, name: str) -> None:
        """Step two of an upload: the bytes to the URL Slack handed out (no token needed)."""
        timeout = aiohttp.ClientTimeout(total=max(60.0, len(data) / 250_000))
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, data=data) as response,
        ):
            body = await response.text()
            if response.status == 429 or response.status >= 500:
                # Retried by the caller, as a dropped connection would be.
                raise aiohttp.ClientResponseError(
                    response.request_info, (), status=response.status, message=body[:200]
                )
            if response.status != 200:
                raise SlackDeliveryError(
                    f"Slack refused the upload of {name}: HTTP {response.status} {body[:200]}"
                )

    async def _is_shared(self, file_id: str, channel: str) -> bool:
        """Whether Slack already shows the file in the channel (a completion that landed)."""
        response = await self.client.api_call("files.info", params={"file": file_id})
        found = response.get("file") or {}
        shares = found.get("shares") or {}
        places = {*(shares.get("public") or {}), *(shares.get("private") or {})}
        for kind in ("channels", "groups", "ims"):
            places.update(found.get(kind) or [])
        return channel in places

    async def post(
        self, channel: str, text: str, *, thread_ts: str | None = None, **extra: Any
    ) -> str:
        """chat.postMessage exactly once, however the network behaves; returns the message ts."""
        post_id = uuid.uuid4().hex
        params: dict[str, Any] = {
            "channel": channel,
            "text": text,
            "metadata": {"event_type": METADATA_EVENT, "event_payload": {"post_id": post_id}},
            "unfurl_links": False,
            **extra,
        }
        if thread_ts:
            params["thread_ts"] = thread_ts
        uncertain = False
        for attempt in range(1, self.attempts + 1):
            try:
                if uncertain:
                    if ts := await self._find_post(channel, thread_ts, post_id):
                        log.info(
                            "slack: a post to %s landed despite the error; not resent", channel
                        )
                        return ts
                    uncertain = False  # it did not land: posting again cannot duplicate it
                response = await self.client.api_call("chat.postMessage", json=params)
                return str(response["ts"])
            except Exception as exc:  # classified below; anything else is re-raised
                delay = self._retry_delay("chat.postMessage", exc, attempt)
                uncertain = uncertain or _maybe_done(exc)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

    async def _find_post(self, channel: str, thread_ts: str | None, post_id: str) -> str | None:
        """The ts of our post with this id, if Slack has it."""
        if thread_ts:
            response = await self.client.api_call(
                "conversations.replies",
                params={
                    "channel": channel,
                    "ts": thread_ts,
                    "limit": LOOKBACK,
                    "include_all_metadata": True,
                },
            )
        else:
            response = await self.client.api_call(
                "conversations.history",
                params={"channel": channel, "limit": LOOKBACK, "include_all_metadata": True},
            )
        for message in response.get("messages") or []:
            payload = (message.get("metadata") or {}).get("event_payload") or {}
            if payload.get("post_id") == post_id:
                return str(message["ts"])
        return None

    def _retry_delay(self, method: str, exc: Exception, attempt: int) -> float:
        """How long to wait before the next attempt; raises when there is none."""
        from slack_sdk.errors import SlackApiError

        retry_after: float | None = None
        if isinstance(exc, SlackApiError):
            status = exc.response.status_code
            if status == 429:
                retry_after = _retry_after(exc.response.headers)
            elif status < 500:
                error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
                raise SlackDeliveryError(f"Slack refused {method}: {error or status}") from exc
        elif not isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError):
            raise exc
        if attempt >= self.attempts:
            raise SlackDeliveryError(
                f"Slack {method} failed after {attempt} attempts: {_describe(exc)}"
            ) from exc
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        delay = retry_after if retry_after is not None else random.uniform(backoff / 2, backoff)
        log.warning(
            "slack: %s failed (%s); attempt %d of %d in %.1f s",
            method,
            _describe(exc),
            attempt + 1,
            self.attempts,
            delay,
        )
        return min(delay, self.max_delay)


def _maybe_done(exc: Exception) -> bool:
    """Whether Slack may have acted although the call failed (so a retry could duplicate)."""
    from slack_sdk.errors import SlackApiError

    if isinstance(exc, SlackApiError):
        return exc.response.status_code >= 500
    # A connection refused before anything was sent cannot have posted.
    return not isinstance(exc, aiohttp.ClientConnectorError)


def _retry_after(headers: Any) -> float:
    for name in ("Retry-After", "retry-after"):
        value = headers.get(name) if headers else None
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            try:
                return max(0.0, float(value))
            except ValueError:
                break
    return 1.0


def _describe(exc: Exception) -> str:
    from slack_sdk.errors import SlackApiError

    if isinstance(exc, SlackApiError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def unsendable(path: Path, limit: int = UPLOAD_LIMIT) -> str | None:
    """Why a file cannot go out to Slack (missing, not a file, over `limit` bytes), or None."""
    return shared_unsendable(path, limit, "Slack")


__all__ = ["METADATA_EVENT", "UPLOAD_LIMIT", "SlackDeliveryError", "SlackSender", "unsendable"]
