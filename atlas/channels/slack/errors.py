"""What a failed Slack Web API call means: retry it or give up, and whether Slack may have acted.

slack_sdk raises SlackApiError for Slack's JSON errors, and also for answers it cannot read; an
answer cut short even comes with aiohttp's raw response in place of a SlackResponse (so it has
`.status`, not `.status_code`, and no data). How each shape arrives, from tests against the fake:

| answer | raised | verdict |
|---|---|---|
| `{"ok": false, "error": "channel_not_found"}` | SlackApiError, status 200 | refused |
| 429 with Retry-After | SlackApiError, status 429 | retry after it |
| 5xx, JSON or a text/HTML page (nginx's 502) | SlackApiError, status 5xx | retry; may have acted |
| empty body | SlackApiError, data None | by status: 2xx may have acted; 5xx retry |
| truncated JSON | SlackApiError, raw aiohttp response | by status, as above |
| connection refused | aiohttp.ClientConnectorError | retry; cannot have acted |
| connection dropped, timeout | aiohttp.ServerDisconnectedError, TimeoutError | retry; may have acted |

"May have acted" makes SlackSender look for the post (or the shared file) before trying again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp

# Errors Slack reports in a 200 answer that are its own trouble, not the request's.
SERVER_SIDE_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable"})
# Errors that say a token will never work again (revoked, its app or account gone): a channel
# that meets one at start is stopped, not retried.
DEAD_TOKEN_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "app_uninstalled",
        "invalid_token",
        "not_allowed_token_type",
    }
)


@dataclass(frozen=True)
class SlackVerdict:
    retry: bool  # False: refused, repeating cannot help
    maybe_done: bool  # Slack may have carried the call out
    reason: str
    retry_after: float | None = None


def classify(exc: BaseException) -> SlackVerdict | None:
    """What `exc` from a Web API call means; None when it is not a Slack or network failure."""
    from slack_sdk.errors import SlackApiError

    if isinstance(exc, SlackApiError):
        return _api_error(exc.response)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return SlackVerdict(True, False, f"no connection ({_describe(exc)})")
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError):
        return SlackVerdict(True, True, _describe(exc))
    return None


def slack_error(exc: BaseException) -> str:
    """The error code of Slack's JSON answer behind `exc` (or one it was raised from), or ""."""
    from slack_sdk.errors import SlackApiError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SlackApiError):
            data = getattr(seen.response, "data", None)
            return str(data.get("error") or "") if isinstance(data, dict) else ""
        seen = seen.__cause__ or seen.__context__
    return ""


def _api_error(response: Any) -> SlackVerdict:
    status = getattr(response, "status_code", None) or getattr(response, "status", 0)
    data = getattr(response, "data", None)
    headers = getattr(response, "headers", None)
    readable = isinstance(data, dict) and "ok" in data
    error = str(data.get("error") or "") if isinstance(data, dict) else ""
    if status == 429:
        return SlackVerdict(True, False, "rate limited (HTTP 429)", _retry_after(headers))
    if status >= 500 or error in SERVER_SIDE_ERRORS:
        return SlackVerdict(
            True, True, f"server error (HTTP {status}{', ' + error if error else ''})"
        )
    if readable:
        return SlackVerdict(False, False, error or f"HTTP {status}")
    # An answer nobody can read (empty, cut short, a page): a 2xx one came from a Slack that
    # acted; an error status (408 aside) means a proxy turned the request away.
    if 200 <= status < 300 or status == 408:
        return SlackVerdict(True, True, f"an unreadable answer (HTTP {status})")
    return SlackVerdict(False, False, f"an unreadable answer (HTTP {status})")


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


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = ["DEAD_TOKEN_ERRORS", "SERVER_SIDE_ERRORS", "SlackVerdict", "classify", "slack_error"]
