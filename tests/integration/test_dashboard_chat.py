"""Chat in real Chromium: the person writes to a bot and sees the reply stream in (half of it
first, then the whole), without a reload, under the dashboard's CSP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.dashboard.auth import issue_login_token
from atlas.dashboard.chat_channel import web_address
from atlas.providers.scripted import Reply
from tests.unit.test_dashboard_chat import chat_rig

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")


async def test_chat_with_a_bot_and_see_the_reply_stream(home_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    async with chat_rig(home_path) as rig:
        base = str(rig.client.make_url("")).rstrip("/")
        rig.model.add(Reply("The zeppelin leaves at 14:05 from pier three."))
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
            )
            page = await browser.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            await page.goto(f"{base}/login?token={issue_login_token(rig.home.root)}")
            await page.get_by_role("button", name="Log in").click()
            await page.get_by_role("link", name="Chat").click()
            await expect(page.get_by_role("heading", name="Chat with atlas")).to_be_visible()
            assert rig.dashboard.chat is not None
            feed = rig.dashboard.chat.feed(web_address("atlas"))
            for _ in range(100):  # until the page's chat stream is open
                if feed.queues:
                    break
                await asyncio.sleep(0.05)
            await page.get_by_label("Message to atlas").fill("When does the zeppelin leave?")
            await page.get_by_label("Message to atlas").press("Tab")
            await page.keyboard.press("Enter")  # Send, by keyboard
            log = page.locator("#chat-log")
            await expect(log).to_contain_text("When does the zeppelin leave?")
            reply = page.locator("#chat-reply")
            await expect(reply).to_contain_text("The zeppelin leaves")  # half of it, streaming
            await expect(reply).not_to_contain_text("14:05")
            rig.model.release.set()
            await expect(log).to_contain_text("The zeppelin leaves at 14:05 from pier three.")
            await expect(reply).not_to_contain_text("zeppelin")  # the finished one is in the log
            await expect(page.get_by_label("Message to atlas")).to_have_value("")
            assert problems == []
            await browser.close()
