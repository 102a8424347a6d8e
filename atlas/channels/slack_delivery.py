"""Slack Web API calls that survive 429s, 5xx and dropped connections, never posting twice.

A 429 is retried after its Retry-After. A 5xx or a dropped connection is ambiguous for
`chat.postMessage`: Slack may have posted the message before the answer was lost. Every post
therefore carries its own id in the message metadata, and before posting again we look in the
channel (or thread) for a message with that id; if it is there, the post is done.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from typing import TYPE_CHECKING, Any

import aiohttp

from atlas.errors import AtlasError

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

METADATA_EVENT = "atlas_reply"
# How many recent messages are searched for a post whose answer was lost.
LOOKBACK = 50


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
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self.client.api_call(method, json=params)
                return dict(response.data)  # type: ignore[arg-type]
            except Exception as exc:  # classified below; anything else is re-raised
                delay = self._retry_delay(method, exc, attempt)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

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


__all__ = ["METADATA_EVENT", "SlackDeliveryError", "SlackSender"]
