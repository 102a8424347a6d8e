"""Answers that real servers give when something between them and the client breaks, for the
fakes' fault injection (`FakeTelegram.fail_next`, `FakeSlack.fail`).

Shapes (`kind`):
- `html502`: nginx's "502 Bad Gateway" page, text/html.
- `empty`: no body at all.
- `truncated`: the JSON answer cut off halfway.
- `drop_after`: the request is carried out, then the connection is closed without an answer.

A shape's status is 502 for `html502` and `empty` and 200 for `truncated` unless a test gives
another. The status says whether the server got as far as the API: a 2xx shape is carried out
(the message is recorded as sent) and only its answer is spoiled, as when a proxy mangles a
good answer; an error status is not carried out, as when nginx cannot reach the API behind it.
"""

from __future__ import annotations

from aiohttp import web

NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)
DEFAULT_STATUS = {"html502": 502, "empty": 502, "truncated": 200}
SPOILED_ANSWERS = frozenset(DEFAULT_STATUS)
SHAPES = SPOILED_ANSWERS | {"drop_after"}


def shape_status(kind: str, status: int | None) -> int:
    return status if status is not None else DEFAULT_STATUS.get(kind, 200)


def carried_out(kind: str, status: int | None) -> bool:
    """Whether the server acts on a request that meets this shape (see the module docstring)."""
    return kind == "drop_after" or 200 <= shape_status(kind, status) < 300


def spoiled_answer(kind: str, status: int | None, answer: web.Response | None) -> web.Response:
    """The answer in this shape: `answer` (what the API said, or None when it never got the
    request) cut short, emptied, or replaced by nginx's page."""
    code = shape_status(kind, status)
    if kind == "html502":
        return web.Response(status=code, text=NGINX_502, content_type="text/html")
    if kind == "empty":
        return web.Response(status=code, body=b"", content_type="application/json")
    body = answer.body if answer is not None and isinstance(answer.body, bytes) else b""
    if not body:
        body = b'{"ok": false, "error": "upstream failed", "description": "Bad Gateway"}'
    return web.Response(status=code, body=body[: len(body) // 2], content_type="application/json")


def drop(request: web.Request) -> web.StreamResponse:
    """Close the TCP connection without an answer: the client sees a dropped connection."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=500)  # never reaches the client


__all__ = [
    "NGINX_502",
    "SHAPES",
    "SPOILED_ANSWERS",
    "carried_out",
    "drop",
    "shape_status",
    "spoiled_answer",
]
