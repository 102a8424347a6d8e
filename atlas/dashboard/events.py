"""Server-sent events: what makes pages live without a reload, over one stream per browser.

`EventHub` fans an event out to every open `/events` stream. A browser holds one stream for
all its tabs: /static/live-worker.js (a SharedWorker) opens it and hands each event to every
tab; where SharedWorker is missing (some phones), each tab with a live part opens its own
(/static/live.js). A browser allows 6 connections per host over HTTP/1.1, so one stream per
panel (or two per Chat tab) stalled everything from the fourth tab on.

The page side: a live part refetches itself on `hx-trigger="live:<name> from:body"`, and on
`live:open` (the stream reopened after a drop: something may have changed meanwhile). Names: `home` when
a channel's health changes and every `heartbeat` seconds (turns, tokens and approvals have no
hook yet), `waiting`, `routines` (Dashboard.watch_routines), and `chat`: a message or the reply
so far for the Chat page, as JSON `{"bot", "part", "html"}` (Dashboard.attach).

A stream ends when the dashboard stops (`close`), so the daemon's shutdown never waits on an
open browser tab; a browser going away is routine (one debug line, no traceback).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from atlas.dashboard.context import dashboard_of
from atlas.dashboard.hub import CLOSED, Event

log = logging.getLogger(__name__)


def encode(event: Event) -> bytes:
    if isinstance(event, str):
        return f"event: {event}\ndata: {event}\n\n".encode()
    return f"event: {event.name}\ndata: {event.data}\n\n".encode()


async def events(request: web.Request) -> web.StreamResponse:
    """`/events`: the event stream of every live part of every tab of one browser."""
    hub = dashboard_of(request).events
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    await response.write(b"retry: 5000\n\n")
    with hub.subscribe() as queue:
        while not hub.closed:
            try:
                event = await asyncio.wait_for(queue.get(), hub.heartbeat)
            except TimeoutError:
                event = "home"
            if event == CLOSED:
                break
            try:
                await response.write(encode(event))
            except ConnectionError:  # the browser went away: nothing to report
                log.debug("dashboard: an event stream's browser went away")
                break
    return response


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/events", events)
