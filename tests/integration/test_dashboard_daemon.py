"""The dashboard served by a running daemon (`atlas run`'s `serve`): where it listens, the
loopback rule at start, `atlas doctor`'s lines, and a person logging in through the link and
searching a conversation in real Chromium."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from atlas.daemon import serve
from atlas.dashboard.cli import dashboard_main
from atlas.dashboard.server import doctor_lines, running_url
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.providers.base import Message, ToolCall
from atlas.store.conversations import ConversationStore
from tests.dashboard_rig import CHROMIUM
from tests.helpers import BASE_CONFIG, make_home


async def until(predicate: Callable[[], object], timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def store_conversation(home: Home) -> int:
    async with ConversationStore(home.main_bot.db_path) as store:
        conversation = await store.conversation("console", "c1", bot="atlas", title="Airships")
        await store.append(conversation.id, Message("user", "When does the zeppelin leave?"))
        call = ToolCall("call-1", "read_file", '{"path": "timetable.md"}')
        await store.append(conversation.id, Message("assistant", "", tool_calls=[call]))
        await store.append(
            conversation.id, Message("tool", "Departure 14:05, pier 3", tool_call_id="call-1")
        )
        await store.append(conversation.id, Message("assistant", "At 14:05 from pier 3."))
        return conversation.id


@pytest.fixture
async def daemon(home_path: Path) -> AsyncIterator[tuple[Home, str, int]]:
    home = make_home(home_path)
    conversation = await store_conversation(home)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(Home(home_path), stop=stop))
    try:
        await until(lambda: running_url(home_path) is not None or task.done())
        url = running_url(home_path)
        assert url is not None, task.exception() if task.done() else "no URL"
        yield home, url, conversation
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert running_url(home_path) is None  # stopped: the run file is gone


def login_link(home: Home) -> str:
    out = io.StringIO()
    assert dashboard_main(home, out) == 0
    return re.search(r"(http://\S+/login\?token=\S+)", out.getvalue()).group(1)  # type: ignore[union-attr]


async def test_the_daemon_serves_the_dashboard_and_the_printed_link_uses_its_port(
    daemon: tuple[Home, str, int],
) -> None:
    home, url, _ = daemon
    link = login_link(home)
    assert link.startswith(url + "/login?token=")  # port 0 in the tests' config: the real one
    async with aiohttp.ClientSession() as client:
        async with client.get(url + "/", allow_redirects=False) as page:
            assert page.status == 303 and page.headers["Location"] == "/login"
        async with client.get(url + "/static/vendor/htmx.min.js") as script:
            assert script.status == 200 and "htmx" in await script.text()
    [line] = doctor_lines(Home(home.root))
    assert line[1] is True and "loopback only; served at " + url in line[2]


async def test_listening_beyond_loopback_without_allow_remote_stops_the_start(
    home_path: Path,
) -> None:
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1").replace(
        'listen = "127.0.0.1:0"', 'listen = "0.0.0.0:0"'
    )
    home = make_home(home_path, config=config)
    [line] = doctor_lines(home)
    assert line[1] is False and "allow_remote" in line[2]
    with pytest.raises(ConfigError, match="allow_remote"):
        await serve(home, stop=asyncio.Event())
    assert not (home_path / "atlas.db").exists()  # nothing started


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")
async def test_a_person_logs_in_through_the_link_and_searches_in_chromium(
    daemon: tuple[Home, str, int],
) -> None:
    from playwright.async_api import async_playwright, expect

    home, url, conversation = daemon
    link = login_link(home)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
            chromium_sandbox=False,
        )
        try:
            page = await browser.new_page()
            problems: list[str] = []  # a CSP violation or a script error shows here
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            await page.goto(link)
            await page.get_by_role("button", name="Log in").click()
            await expect(page.get_by_role("heading", name="Home")).to_be_visible()
            await page.get_by_role("link", name="Conversations").click()
            await page.get_by_label("Search").fill("zeppelins")
            await page.get_by_role("button", name="Search").click()
            result = page.get_by_role("link", name=re.compile(f"atlas #{conversation}"))
            await expect(result).to_be_visible()
            await expect(page.locator("mark").first).to_have_text(re.compile("zeppelin", re.I))
            await result.click()
            await page.get_by_text("read_file").click()  # the folded call opens
            await expect(page.get_by_text("Departure 14:05, pier 3")).to_be_visible()
            assert problems == []
            # The link worked once: used again, it is refused.
            again = await browser.new_page()
            await again.goto(link)
            await again.get_by_role("button", name="Log in").click()
            await expect(again.get_by_role("alert")).to_contain_text("does not work")
        finally:
            await browser.close()


async def test_a_secret_others_may_read_stops_the_start(home_path: Path) -> None:
    from atlas.dashboard.auth import ensure_secret, secret_path
    from atlas.errors import AtlasError

    home = make_home(home_path)
    ensure_secret(home.root)
    secret_path(home.root).chmod(0o644)
    with pytest.raises(AtlasError, match="chmod 600"):
        await serve(home, stop=asyncio.Event())
    assert not (home_path / "atlas.db").exists()  # nothing started
