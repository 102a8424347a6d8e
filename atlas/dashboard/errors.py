"""How the dashboard fails: in its own layout for a person, quietly for a browser gone away.

A 4xx a browser navigates to (a mistyped address, a bad query) is the dashboard's page with
the reason and a way back, not aiohttp's bare text; htmx requests and event streams keep the
short text (htmx shows no page). A browser that goes away mid-request (a tab closed, a
phone's network lost) is routine: one debug line instead of aiohttp's ERROR traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from atlas.dashboard.render import render

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SHOWN_AS_PAGES = {400: "Bad request", 403: "Not allowed", 404: "Not found", 405: "Not allowed"}


def _a_person_navigating(request: web.Request) -> bool:
    headers = request.headers
    return "HX-Request" not in headers and "text/html" in headers.get("Accept", "")


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        title = SHOWN_AS_PAGES.get(exc.status)
        if title is None or not _a_person_navigating(request):
            raise
        reason = exc.text or exc.reason
        if reason.startswith(f"{exc.status}: "):  # aiohttp's own text ("404: Not Found")
            reason = {404: "There is no page at this address."}.get(exc.status, exc.reason)
        return render(request, "error.html", status=exc.status, title=title, reason=reason)
    except ConnectionError as exc:
        if not _gone(request):  # ours (a socket we opened), not the browser's: a real error
            raise
        _went_away(request, exc)
        raise web.HTTPBadRequest(text="the connection was lost") from None  # never sent
    except asyncio.CancelledError as exc:  # aiohttp cancels the handler of a lost connection
        if _gone(request):
            _went_away(request, exc)
        raise


def _went_away(request: web.Request, exc: BaseException) -> None:
    why = type(exc).__name__
    log.debug("dashboard: %s %s: the browser went away (%s)", request.method, request.path, why)
