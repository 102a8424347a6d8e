"""Server-sent events: what makes pages live without a reload.

`EventHub` fans an event name out to every open `/events` stream; a page subscribes with the
htmx SSE extension (`hx-ext="sse" sse-connect="/events"`) and refetches its live part on
`hx-trigger="sse:<name>"`. Today: `home` when a channel's health changes, and every
`heartbeat` seconds (turns, tokens and approvals have no hook yet). Waiting and Chat publish
their own names on the same hub, and the daemon's routine scheduler `routines` (a run started
or ended, routines synced: Dashboard.watch_routines).

A stream ends when the dashboard stops (`close`), so the daemon's shutdown never waits on an
open browser tab.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from atlas.dashboard.context import dashboard_of
from atlas.dashboard.hub import CLOSED


async def events(request: web.Request) -> web.StreamResponse:
    """`/events`: an event stream; each event's data is its name."""
    hub = dashboard_of(request).events
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    await response.write(b"retry: 5000\n\n")
    with hub.subscribe() as queue:
        while not hub.closed:
            try:
                name = await asyncio.wait_for(queue.get(), hub.heartbeat)
            except TimeoutError:
                name = "home"
            if name == CLOSED:
                break
            try:
                await response.write(f"event: {name}\ndata: {name}\n\n".encode())
            except ConnectionError:  # the tab closed
                break
    return response


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/events", events)
