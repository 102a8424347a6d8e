"""Home is live in a real browser: a channel's health changes, and the page shows it without a
reload (server-sent events through htmx's SSE extension, under the dashboard's CSP)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from atlas.channels.supervisor import ChannelHealth
from atlas.dashboard.app import build_app
from atlas.dashboard.auth import Signer, read_secret
from atlas.dashboard.context import Dashboard
from atlas.store.home_db import HomeStore
from tests.dashboard_rig import CHROMIUM, logged_in_tab
from tests.helpers import close_test_stores, make_home, open_store_for_tests

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")


async def test_home_shows_a_channel_change_without_a_reload(home_path: Path) -> None:
    from playwright.async_api import expect

    home = make_home(home_path)
    audit = HomeStore(home.db_path)
    health = {"telegram:atlas": ChannelHealth("telegram:atlas")}
    dashboard = Dashboard(
        home, open_store_for_tests, audit, Signer(read_secret(home.root)), lambda: health
    )
    dashboard.watch_channels()
    runner = web.AppRunner(build_app(dashboard))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        async with logged_in_tab(base, home.root) as (page, problems):
            await expect(page.locator("#live")).to_contain_text("telegram:atlas: starting since")
            for _ in range(100):  # until the page's event stream is open
                if dashboard.events.streams:
                    break
                await asyncio.sleep(0.05)
            assert dashboard.events.streams == 1
            health["telegram:atlas"].reconnecting("ConnectionError: refused; restart 1")
            await expect(page.locator("#live")).to_contain_text("reconnecting since")
            assert problems == []
    finally:
        dashboard.events.close()  # as DashboardServer.stop does: open streams end
        await runner.cleanup()
        await audit.close()
        await close_test_stores()
