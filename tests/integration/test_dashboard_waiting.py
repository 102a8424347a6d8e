"""Waiting in real Chromium: a Telegram turn (real aiogram against the fake Bot API, the real
dispatcher and tool loop) waits on an approval; the person answers it on the dashboard, the
turn goes on, and the Telegram message shows the answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from atlas.dashboard.app import build_app
from atlas.dashboard.auth import Signer, read_secret
from atlas.dashboard.context import Dashboard
from atlas.providers.scripted import Reply
from atlas.trust.gate import ALLOW_ONCE
from tests.dashboard_rig import CHROMIUM, logged_in_tab
from tests.helpers import open_store_for_tests
from tests.integration.test_telegram import OWNER, TOOL_RUNS, AskForShout, _harness

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")


async def test_an_approval_a_telegram_turn_waits_on_is_answered_in_chromium(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.async_api import expect

    gate = AskForShout()
    gate.ask_timeout = 60
    async with _harness(tmp_path, monkeypatch, gate=gate) as tg:
        dashboard = Dashboard(
            tg.home, open_store_for_tests, tg.runtime.audit, Signer(read_secret(tg.home.root))
        )
        dashboard.attach(tg.dispatcher)
        runner = web.AppRunner(build_app(dashboard))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            async with logged_in_tab(base, tg.home.root) as (page, problems):
                await page.get_by_role("link", name="Waiting").click()
                await expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
                for _ in range(100):  # until the page's event stream is open
                    if dashboard.events.streams:
                        break
                    await asyncio.sleep(0.05)

                # The Telegram turn asks; the page shows the question without a reload.
                tg.model.add(Reply(calls=[("shout", {"text": "ok"})]), Reply("shouted"))
                await tg.fake.push(tg.fake.message("shout ok", user_id=OWNER))
                await expect(page.get_by_text("Let the bot shout?")).to_be_visible()
                # The page may show the question before its post to Telegram has arrived.
                await tg.fake.wait_for(lambda: bool(tg.fake.messages))
                message_id = next(iter(tg.fake.messages))
                await page.get_by_role("button", name=ALLOW_ONCE).click()
                await expect(page.get_by_text("Answered: allow once.")).to_be_visible()

                # The turn goes on, and the Telegram message shows the answer, buttons gone.
                await tg.fake.wait_for(lambda: "shouted" in tg.fake.sent_texts(OWNER))
                assert TOOL_RUNS == ["ok"]
                await tg.fake.wait_for(lambda: "edited" in tg.fake.messages[message_id])
                edited = tg.fake.messages[message_id]
                assert f"{ALLOW_ONCE} (on the dashboard)" in edited["text"]
                assert "reply_markup" not in edited["edited"]
                await expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
                assert problems == []
        finally:
            dashboard.events.close()
            await runner.cleanup()
