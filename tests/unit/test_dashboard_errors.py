"""The dashboard's failures: a 404 or 400 a person navigates to is a page in the dashboard's
layout with the reason; htmx gets the short text; a browser that goes away mid-request is
one debug line, not an ERROR traceback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.dashboard_rig import Rig, dashboard_rig

PAGE = {"Accept": "text/html,application/xhtml+xml"}  # as a browser navigates


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


async def test_a_404_and_a_400_are_pages_in_the_dashboards_layout(rig: Rig) -> None:
    await rig.log_in()
    missing = await rig.client.get("/nowhere", headers=PAGE)
    text = await missing.text()
    assert missing.status == 404 and missing.content_type == "text/html"
    assert '<nav aria-label="Pages">' in text and "<h1>Not found</h1>" in text
    assert "There is no page at this address." in text and 'href="/"' in text

    bad = await rig.client.get("/conversations/atlas/1?before=soon", headers=PAGE)
    text = await bad.text()
    assert bad.status in (400, 404) and '<nav aria-label="Pages">' in text
    no_bot = await rig.client.get("/conversations?bot=nobody", headers=PAGE)
    assert no_bot.status == 404 and "there is no bot &#39;nobody&#39;" in await no_bot.text()

    htmx = await rig.client.get("/nowhere", headers={**PAGE, "HX-Request": "true"})
    assert htmx.status == 404 and "<nav" not in await htmx.text()  # htmx shows no page


async def test_a_browser_going_away_mid_request_is_one_debug_line(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A form POST whose body never arrives (the tab closed while sending)."""
    await rig.log_in()
    cookies = rig.client.session.cookie_jar.filter_cookies(rig.client.make_url("/"))
    cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in cookies.items())
    server = rig.client.server
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        (
            "POST /chat/atlas HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            "Content-Length: 100000\r\n\r\ntext=half"
        ).encode()
    )
    await writer.drain()
    await asyncio.sleep(0.2)  # the guard waits for the form
    writer.transport.abort()
    for _ in range(100):
        if any("went away" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.02)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    [gone] = [r for r in caplog.records if "went away" in r.getMessage()]
    assert gone.levelno == logging.DEBUG and gone.exc_info is None
    del reader
