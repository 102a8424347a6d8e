"""Which kind each platform failure is (atlas/channels/send_errors.py), for the shapes the fakes
cannot easily make: timeouts, refused connections, a proxy's 4xx page, Slack's own 5xx codes."""

from __future__ import annotations

import json

import aiohttp
import pytest

from atlas.channels.slack import errors as slack_errors
from atlas.channels.telegram import errors as telegram_errors


def network_error(cause: BaseException) -> Exception:
    from aiogram.exceptions import TelegramNetworkError
    from aiogram.methods import SendMessage

    try:
        raise TelegramNetworkError(SendMessage(chat_id=1, text="x"), "lost") from cause
    except TelegramNetworkError as exc:
        return exc


def undecodable(status: int, body: str = "<html><title>x</title></html>") -> Exception:
    from aiogram.exceptions import ClientDecodeError

    try:
        json.loads(body)
    except ValueError as exc:
        error = ClientDecodeError("Failed to decode object", exc, body)
    error.http_status = status  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize(
    ("error", "method", "kind"),
    [
        (network_error(TimeoutError()), "sendMessage", "maybe"),
        (network_error(TimeoutError()), "editMessageText", "retry"),
        (network_error(aiohttp.ServerDisconnectedError()), "sendMessage", "maybe"),
        (network_error(aiohttp.ServerDisconnectedError()), "getUpdates", "retry"),
        (network_error(aiohttp.ConnectionTimeoutError()), "sendMessage", "retry"),
        (undecodable(502), "sendMessage", "retry"),
        (undecodable(429), "sendMessage", "retry"),
        (undecodable(200, '{"ok": tr'), "sendMessage", "maybe"),
        (undecodable(200, '{"ok": tr'), "answerCallbackQuery", "retry"),
        (undecodable(413), "sendDocument", "refused"),  # nginx's "Request Entity Too Large"
    ],
)
def test_telegram_kinds(error: Exception, method: str, kind: str) -> None:
    verdict = telegram_errors.classify(error, method)
    assert verdict is not None and verdict.kind == kind


def test_a_refused_connection_is_never_maybe_delivered() -> None:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))
    verdict = telegram_errors.classify(network_error(refused), "sendMessage")
    assert verdict is not None and verdict.kind == "retry"
    slack = slack_errors.classify(refused)
    assert slack is not None and slack.retry and not slack.maybe_done


def test_not_aiogram_or_slack_errors_are_left_alone() -> None:
    assert telegram_errors.classify(ValueError("a bug"), "sendMessage") is None
    assert slack_errors.classify(ValueError("a bug")) is None
    assert slack_errors.classify(TimeoutError()) is not None  # TimeoutError: the network


@pytest.mark.parametrize(
    ("status", "data", "retry", "maybe_done"),
    [
        (200, {"ok": False, "error": "channel_not_found"}, False, False),
        (200, {"ok": False, "error": "internal_error"}, True, True),
        (200, None, True, True),  # an empty 200: Slack acted, the answer was lost
        (502, {}, True, True),
        (403, None, False, False),  # a proxy's refusal page
        (429, {"ok": False, "error": "ratelimited"}, True, False),
    ],
)
def test_slack_kinds(status: int, data: object, retry: bool, maybe_done: bool) -> None:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

    response = AsyncSlackResponse(
        client=None,
        http_verb="POST",
        api_url="http://x/api/chat.postMessage",
        req_args={},
        data=data,  # type: ignore[arg-type]
        headers={"Retry-After": "2"},
        status_code=status,
    )
    verdict = slack_errors.classify(SlackApiError("failed", response))
    assert verdict is not None
    assert (verdict.retry, verdict.maybe_done) == (retry, maybe_done)
    if status == 429:
        assert verdict.retry_after == 2.0
