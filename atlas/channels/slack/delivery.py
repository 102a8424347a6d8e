"""Slack Web API calls that survive 429s, 5xx, unreadable answers (a proxy's HTML 502 page, an
empty body, JSON cut short) and dropped connections, never posting twice.

A 429 is retried after its Retry-After. A 5xx, a 2xx answer nobody can read or a dropped
connection is ambiguous for `chat.postMessage`: Slack may have posted the message before the
answer was lost (slack_errors.py sorts the failures). Every post therefore carries its own id in
the message metadata, and before posting again we look in the channel (or thread) for a
message with that id; if it is there, the post is done. If that cannot be told (the look-up
is refused, or the attempts run out while in doubt), the post raises MaybeDelivered and is
never repeated.

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
from atlas.channels.send_errors import MaybeDelivered, NeverRetry, RetryLater
from atlas.channels.slack.errors import SlackVerdict, classify

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

METADATA_EVENT = "atlas_reply"
# How many recent messages are searched for a post whose answer was lost.
LOOKBACK = 50
# Slack takes files up to 1 GB.
UPLOAD_LIMIT = 1024 * 1024 * 1024
T = TypeVar("T")


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

    async def call_once(self, method: str, **params: Any) -> dict[str, Any]:
        """One attempt, never retried (a decoration such as a reaction, which must not wait
        out a Retry-After): RetryLater or NeverRetry when it fails."""
        try:
            response = await self.client.api_call(method, json=params)
        except Exception as exc:  # classified below; anything else is re-raised
            verdict = _verdict(exc)
            if not verdict.retry:
                raise NeverRetry(f"Slack refused {method}: {verdict.reason}") from exc
            raise RetryLater(f"Slack {method} failed: {verdict.reason}") from exc
        return dict(response.data)  # type: ignore[arg-type]

    async def _repeated(self, what: str, action: Callable[[], Awaitable[T]]) -> T:
        """`action` until it succeeds, retried on 429, 5xx, unreadable answers and dropped
        connections (for calls that are safe to repeat)."""
        for attempt in range(1, self.attempts + 1):
            try:
                return await action()
            except Exception as exc:  # classified below; anything else is re-raised
                delay = self._retry_delay(what, _verdict(exc), attempt)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

    async def _exactly_once(
        self,
        what: str,
        act: Callable[[], Awaitable[T]],
        landed: Callable[[], Awaitable[T | None]],
    ) -> T:
        """`act` (which Slack may carry out although its answer is lost) until it succeeds,
        asking `landed` before each repeat whether the lost attempt took effect (its result if
        so). MaybeDelivered when that cannot be told."""
        uncertain = False
        for attempt in range(1, self.attempts + 1):
            try:
                if uncertain:
                    if (found := await landed()) is not None:
                        log.info("slack: %s took effect despite the error; not repeated", what)
                        return found
                    uncertain = False  # it did not land: repeating cannot duplicate it
                return await act()
            except Exception as exc:  # classified below; anything else is re-raised
                verdict = _verdict(exc)
                if uncertain and not verdict.retry:  # the look-up was refused
                    raise MaybeDelivered(
                        f"Slack {what} may have been carried out, and whether it was cannot "
                        f"be checked: {verdict.reason}"
                    ) from exc
                uncertain = uncertain or verdict.maybe_done
                if uncertain and verdict.retry and attempt == self.attempts:
                    return await self._settle(what, landed, verdict, attempt)
                delay = self._retry_delay(what, verdict, attempt)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

    async def _settle(
        self,
        what: str,
        landed: Callable[[], Awaitable[T | None]],
        verdict: SlackVerdict,
        attempts: int,
    ) -> T:
        """The attempts ran out with the last one in doubt: one more look tells whether it
        took effect (done), did not (RetryLater: it is kept and sent later) or cannot be told."""
        failed = f"Slack {what} failed after {attempts} attempts: {verdict.reason}"
        try:
            found = await landed()
        except Exception as exc:
            _verdict(exc)  # re-raises what is neither Slack's nor the network's
            raise MaybeDelivered(f"{failed}; whether the last one arrived is unknown") from exc
        if found is None:
            raise RetryLater(failed)
        log.info("slack: %s took effect despite the error; not repeated", what)
        return found

    async def upload(
        self, channel: str, path: Path, *, thread_ts: str | None = None, data: bytes | None = None
    ) -> str:
        """Share a file into the channel (and thread) exactly once; returns its file id.
        With `data`, that is the file's content and `path` only names it."""
        if data is None:
            data = await asyncio.to_thread(path.read_bytes)

        async def prepare() -> str:
            # A fresh upload URL each time: an unfinished upload is never shared, only dropped.
            slot = await self.client.files_getUploadURLExternal(
                filename=path.name, length=len(data)
            )
            await self._send_bytes(str(slot["upload_url"]), data, path.name)
            return str(slot["file_id"])

        file_id = await self._repeated("files.getUploadURLExternal", prepare)

        async def complete() -> str:
            await self.client.files_completeUploadExternal(
                files=[{"id": file_id, "title": path.name}],
                channel_id=channel,
                thread_ts=thread_ts,
            )
            return file_id

        async def shared() -> str | None:
            return file_id if await self._is_shared(file_id, channel) else None

        return await self._exactly_once("files.completeUploadExternal", complete, shared)

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
                raise NeverRetry(
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

        async def post() -> str:
            response = await self.client.api_call("chat.postMessage", json=params)
            return str(response["ts"])

        async def posted() -> str | None:
            return await self._find_post(channel, thread_ts, post_id)

        return await self._exactly_once("chat.postMessage", post, posted)

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

    def _retry_delay(self, method: str, verdict: SlackVerdict, attempt: int) -> float:
        """How long to wait before the next attempt; NeverRetry or RetryLater when none."""
        if not verdict.retry:
            raise NeverRetry(f"Slack refused {method}: {verdict.reason}")
        if attempt >= self.attempts:
            raise RetryLater(f"Slack {method} failed after {attempt} attempts: {verdict.reason}")
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        delay = verdict.retry_after
        if delay is None:
            delay = random.uniform(backoff / 2, backoff)
        log.warning(
            "slack: %s failed (%s); attempt %d of %d in %.1f s",
            method,
            verdict.reason,
            attempt + 1,
            self.attempts,
            delay,
        )
        return min(delay, self.max_delay)


def _verdict(exc: Exception) -> SlackVerdict:
    """The verdict on `exc`, which is re-raised when it is neither Slack's nor the network's."""
    verdict = classify(exc)
    if verdict is None:
        raise exc
    return verdict


def unsendable(path: Path, limit: int = UPLOAD_LIMIT) -> str | None:
    """Why a file cannot go out to Slack (missing, not a file, over `limit` bytes), or None."""
    return shared_unsendable(path, limit, "Slack")


__all__ = ["METADATA_EVENT", "UPLOAD_LIMIT", "SlackSender", "unsendable"]
