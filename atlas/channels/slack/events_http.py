"""The Events API endpoint (`mode = "http"`): Slack posts signed requests; we check the signature
before reading anything else, then hand the request to slack-bolt.

bolt parsed the body first and checked the signature after, so anyone who could reach the URL
got a 500 and a full traceback in the log for a body that was not JSON: the log was theirs to
fill. Now an unsigned (or wrongly signed, or stale) request gets 401 and a malformed signed one
400, each with one log line and no traceback.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncApp

log = logging.getLogger(__name__)

MAX_CLOCK_SKEW = 60 * 5  # seconds: Slack's own rule for a request's timestamp
MAX_BODY = 1024 * 1024  # bytes; Slack's events are a few KB (aiohttp's own default limit)


def signature_problem(secret: str, body: bytes, headers: Any, now: float) -> str | None:
    """Why the request is not Slack's, or None when its signature is good."""
    from slack_sdk.signature import SignatureVerifier

    timestamp = headers.get("X-Slack-Request-Timestamp")
    signature = headers.get("X-Slack-Signature")
    if not timestamp or not signature:
        return "no X-Slack-Signature / X-Slack-Request-Timestamp header"
    if not timestamp.isdigit():
        return f"the timestamp {timestamp[:20]!r} is not a number"
    if abs(now - int(timestamp)) > MAX_CLOCK_SKEW:
        return "the timestamp is more than 5 minutes off (a replay, or a wrong clock)"
    expected = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    if expected is None or not hmac.compare_digest(expected, signature):
        return "the signature does not match the signing secret"
    return None


def events_endpoint(
    app: AsyncApp, secret: str, channel: str
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler for the Events API path of `channel` (its name, for the log)."""
    from slack_bolt.adapter.aiohttp import to_aiohttp_response
    from slack_bolt.request.async_request import AsyncBoltRequest

    def refuse(request: web.Request, status: int, why: str) -> web.Response:
        log.warning(
            "%s: refused a request to the Events API from %s (HTTP %d): %s",
            channel,
            request.remote,
            status,
            why,
        )
        return web.Response(status=status, text=why)

    async def events(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if problem := signature_problem(secret, body, request.headers, time.time()):
            return refuse(request, 401, problem)
        try:
            text = body.decode()
            bolt_request = AsyncBoltRequest(
                body=text,
                query=request.query_string,
                headers=request.headers,  # type: ignore[arg-type]
            )
        except (ValueError, AttributeError) as exc:  # not UTF-8, not JSON, not a JSON object
            return refuse(request, 400, f"the body is not a Slack event ({type(exc).__name__})")
        if not isinstance(bolt_request.body, dict) or not bolt_request.body:
            return refuse(request, 400, "the body is empty")
        return await to_aiohttp_response(await app.async_dispatch(bolt_request))

    return events


__all__ = ["MAX_BODY", "events_endpoint", "signature_problem"]
