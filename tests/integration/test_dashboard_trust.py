"""Trust in real Chromium, against `atlas run` (serve) over the OpenAI fake: a person changes a
bot's mode on the Trust page (bot.toml has it, and the bot's next turn runs in it: read-only
withholds the file-editing tools from the model); the same form is refused without the session
cookie, and without its CSRF token, leaving bot.toml as it was.

One daemon and one Chromium serve the whole module (module-scoped, on the module's event
loop); each test opens its own browser context (its own cookies) and reads the mode it starts
from, so the tests do not depend on their order."""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from atlas.dashboard.auth import issue_login_token
from atlas.home import Home
from tests.dashboard_rig import CHROMIUM

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed"),
    pytest.mark.asyncio(loop_scope="module"),
]
EDITING_TOOLS = {"write_file", "edit_file"}  # edits_files=True: withheld in read-only mode


@dataclass
class Rig:
    home: Home
    url: str
    server: Any  # FakeOpenAIServer
    browser: Any  # playwright Browser

    @property
    def bot_toml(self) -> Path:
        return self.home.bot("atlas").root / "bot.toml"

    def mode_in_file(self) -> str:
        return str(tomllib.loads(self.bot_toml.read_text(encoding="utf-8"))["mode"])

    async def logged_in_page(self) -> Any:
        """A page of a new browser context (its own cookie jar), logged in through a link."""
        from playwright.async_api import expect

        context = await self.browser.new_context()
        page = await context.new_page()
        await page.goto(f"{self.url}/login?token={issue_login_token(self.home.root)}")
        await page.get_by_role("button", name="Log in").click()
        await expect(page.get_by_role("heading", name="Home")).to_be_visible()
        return page


async def until(predicate: Callable[[], object], timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    from playwright.async_api import async_playwright

    from atlas.daemon import serve
    from atlas.dashboard.server import running_url
    from tests.fakes.model_servers import FakeOpenAIServer
    from tests.helpers import make_home

    home_path = tmp_path_factory.mktemp("trust") / "home"
    async with FakeOpenAIServer() as server:
        make_home(home_path, base_url=server.base_url)
        stop = asyncio.Event()
        task = asyncio.create_task(serve(Home(home_path), stop=stop))
        try:
            await until(lambda: running_url(home_path) is not None or task.done())
            url = running_url(home_path)
            assert url is not None, task.exception() if task.done() else "no URL"
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
                )
                try:
                    yield Rig(Home(home_path), url, server, browser)
                finally:
                    await browser.close()
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)


def tools_offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


async def chat_turn(rig: Rig, page: Any, text: str, reply: str) -> dict[str, Any]:
    """Send `text` on atlas's Chat page; the model request of that turn, once its reply is in."""
    from playwright.async_api import expect

    rig.server.reply(text=reply)
    await page.goto(f"{rig.url}/chat/atlas")
    await page.get_by_label("Message to atlas").fill(text)
    await page.get_by_role("button", name="Send").click()

    def asked() -> dict[str, Any] | None:
        for request in rig.server.requests:
            if any(text in str(m.get("content")) for m in request["messages"]):
                return request
        return None

    await until(lambda: asked() is not None)
    for _ in range(100):  # the finished reply is stored; a reload shows it
        await page.reload()
        if reply in await page.locator("#chat-log").inner_text():
            break
        await asyncio.sleep(0.1)
    await expect(page.locator("#chat-log")).to_contain_text(reply)
    request = asked()
    assert request is not None
    return request


async def test_a_person_changes_a_bots_mode_and_its_next_turn_runs_in_it(rig: Rig) -> None:
    from playwright.async_api import expect

    page = await rig.logged_in_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    before = await chat_turn(rig, page, "Before: may you write files?", "I may write files.")
    assert tools_offered(before) >= EDITING_TOOLS  # the bot's mode allows edits now

    await page.get_by_role("link", name="Trust").click()
    select = page.get_by_label("atlas", exact=True)
    await expect(select).to_have_value("ask")
    await select.select_option("read-only")
    await select.locator("xpath=..").get_by_role("button", name="Save").click()
    await expect(page.get_by_role("status")).to_contain_text("Mode of atlas saved.")
    await expect(page.get_by_label("atlas", exact=True)).to_have_value("read-only")
    await expect(page.locator("table.decisions")).to_contain_text("mode ask -> read-only")
    assert rig.mode_in_file() == "read-only"
    assert "# ask | auto" in rig.bot_toml.read_text(encoding="utf-8")  # its comment kept

    after = await chat_turn(rig, page, "After: may you write files?", "I may only read.")
    offered = tools_offered(after)
    assert "read_file" in offered and not EDITING_TOOLS & offered  # withheld: read-only
    rig.server.assert_complete()  # each turn one request, each answered as scripted
    assert problems == []
    await page.context.close()


async def test_a_browser_without_the_session_cookie_is_sent_to_log_in(rig: Rig) -> None:
    from playwright.async_api import expect

    stranger = await rig.browser.new_context()
    page = await stranger.new_page()
    await page.goto(f"{rig.url}/trust")
    assert page.url == f"{rig.url}/login"
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await expect(page.locator("form[action='/trust/mode']")).to_have_count(0)
    await stranger.close()


async def test_the_mode_form_sent_without_the_session_cookie_is_refused(rig: Rig) -> None:
    """Loaded while logged in and sent after the cookie is gone: refused (401), though the
    form carries its CSRF token."""
    from playwright.async_api import expect

    page = await rig.logged_in_page()
    await page.goto(f"{rig.url}/trust")
    mode = rig.mode_in_file()
    wanted = "auto" if mode != "auto" else "ask"
    await page.get_by_label("atlas", exact=True).select_option(wanted)
    await page.context.clear_cookies()
    async with page.expect_response(f"{rig.url}/trust/mode") as answer:
        await page.locator("form[action='/trust/mode'] button").click()
    assert (await answer.value).status == 401
    await expect(page.locator("body")).to_contain_text("log in first")
    assert rig.mode_in_file() == mode
    await page.context.close()


# The page's own form, its CSRF field changed in the page before it is sent.
SPOIL_CSRF = {
    "removed": "form => form.querySelector('input[name=csrf]').remove()",
    "altered": "form => { const f = form.querySelector('input[name=csrf]');"
    " f.value = f.value.slice(0, -2) + (f.value.endsWith('AA') ? 'BB' : 'AA'); }",
}


@pytest.mark.parametrize("how", sorted(SPOIL_CSRF))
async def test_with_the_cookie_but_without_the_csrf_token_the_mode_form_is_refused(
    rig: Rig, how: str
) -> None:
    from playwright.async_api import expect

    page = await rig.logged_in_page()
    await page.goto(f"{rig.url}/trust")
    mode = rig.mode_in_file()
    wanted = "auto" if mode != "auto" else "ask"
    form = page.locator("form[action='/trust/mode']")
    await form.evaluate(SPOIL_CSRF[how])
    assert (await form.locator("input[name=csrf]").count()) == (0 if how == "removed" else 1)
    await page.get_by_label("atlas", exact=True).select_option(wanted)
    async with page.expect_response(f"{rig.url}/trust/mode") as answer:
        await form.get_by_role("button", name="Save").click()
    assert (await answer.value).status == 403
    await expect(page.locator("body")).to_contain_text("missing or wrong CSRF token")
    assert rig.mode_in_file() == mode
    await page.goto(f"{rig.url}/trust")  # still logged in: the page shows the mode unchanged
    await expect(page.get_by_label("atlas", exact=True)).to_have_value(mode)
    await page.context.close()
