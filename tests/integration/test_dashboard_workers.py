"""The dashboard (served by the home's process) with a bot served by a worker process: `atlas
run` with `[daemon] workers = 2`, bot01 in worker 1 (a real child process), real aiogram and
openai against the fakes on 127.0.0.1, the dashboard driven over HTTP with a logged-in
session. bot01's Telegram turn waits on an approval that the Waiting page lists and answers
(the turn goes on, the Telegram question is edited to show the page's answer); the chat's
answer closes the page's entry; the Chat page talks to bot01 (the reply streams back, /stop
stops it); a mode changed on Trust reaches the worker (/status there shows it); a subagent of
bot01 is listed on the Workbench and stopped from it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from atlas.daemon import serve
from atlas.dashboard.auth import issue_login_token
from atlas.dashboard.server import running_url
from atlas.home import Home
from atlas.trust.gate import ALLOW_ONCE
from scripts.loadkit import FIRST_CHAT, Fakes
from tests.dashboard_rig import CHROMIUM, logged_in_tab
from tests.helpers import worker_fakes
from tests.integration.test_workers import until, worker_pids

BOTS = 3  # atlas and bot02 in the home's process, bot01 in worker 1
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
APPROVAL_FORM = re.compile(r'action="/waiting/([0-9a-f]+)/approval"')


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Fakes]:
    async with worker_fakes(monkeypatch, BOTS) as made:
        yield made


class Page:
    """A logged-in browser session, over HTTP."""

    def __init__(self, client: aiohttp.ClientSession, url: str, csrf: str) -> None:
        self.client, self.url, self.csrf = client, url, csrf

    async def get(self, path: str) -> str:
        async with self.client.get(self.url + path) as answer:
            assert answer.status == 200, (path, answer.status, await answer.text())
            return await answer.text()

    async def post(self, path: str, *, htmx: bool = False, **form: str) -> str:
        data = {"csrf": self.csrf, **form}
        headers = {"HX-Request": "true", "X-CSRF-Token": self.csrf} if htmx else {}
        async with self.client.post(self.url + path, data=data, headers=headers) as answer:
            assert answer.status == 200, (path, answer.status, await answer.text())
            return await answer.text()


@contextlib.asynccontextmanager
async def daemon_with_a_page(home: Home, fakes: Fakes) -> AsyncIterator[Page]:
    """`atlas run` for `home` (its worker started, every bot polling) and a logged-in page."""
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        await until(lambda: running_url(home.root) is not None or daemon.done())
        await until(lambda: len(worker_pids()) == 1)
        url = running_url(home.root)
        assert url is not None
        for telegram in fakes.telegrams:  # every bot polls: the worker's channels are up
            await telegram.wait_for(lambda t=telegram: t.polls > 0, timeout=30)
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        async with aiohttp.ClientSession(cookie_jar=jar) as client:
            token = issue_login_token(home.root)
            async with client.post(url + "/login", data={"token": token}) as answer:
                assert answer.status == 200
                csrf = CSRF.search(await answer.text())
            assert csrf is not None
            yield Page(client, url, csrf.group(1))
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)
    assert worker_pids() == []


@pytest.fixture
async def running(tmp_path: Path, fakes: Fakes) -> AsyncIterator[tuple[Home, Fakes, Page]]:
    root = tmp_path / "home"
    fakes.write_home(root, conversations=1, workers=2)  # its dashboard on a free port
    home = Home(root)
    async with daemon_with_a_page(home, fakes) as page:
        yield home, fakes, page


async def waiting_ask(page: Page, text: str) -> str:
    """The id of the open approval whose question holds `text`, once the page lists it."""
    for _ in range(300):
        html = (await page.get("/waiting/live")).split("Answered lately")[0]
        if text in html:
            found = APPROVAL_FORM.search(html)
            assert found is not None, html
            return found.group(1)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no question with {text!r} on Waiting")


def read_config_call(home: Home) -> tuple[str, dict[str, str]]:
    """A read_file call the gate asks the person about (a file of the Atlas home)."""
    return ("read_file", {"path": str(home.root / "config.toml")})


async def test_a_workers_approval_is_answered_on_the_page_and_the_chat_message_shows_it(
    running: tuple[Home, Fakes, Page],
) -> None:
    home, fakes, page = running
    telegram = fakes.telegrams[1]  # bot01: served by worker 1
    fakes.model.reply(calls=[read_config_call(home)])
    await telegram.push(telegram.message("T1-0-1 read the config", user_id=FIRST_CHAT))
    ask_id = await waiting_ask(page, "wants to read")
    assert "bot01" in await page.get("/waiting/live")
    assert "wants to read" in await page.get("/")  # Home's "what waits for you" too
    # The page may list the question before its post to Telegram has arrived.
    await telegram.wait_for(
        lambda: any("wants to read" in m["text"] for m in telegram.messages.values()), timeout=10
    )
    [question_id] = [i for i, m in telegram.messages.items() if "wants to read" in m["text"]]

    answered = await page.post(f"/waiting/{ask_id}/approval", htmx=True, choice=ALLOW_ONCE)
    assert f"Answered: {ALLOW_ONCE}." in answered
    # The turn goes on in the worker, and the Telegram question shows the page's answer.
    await telegram.wait_for(
        lambda: any("T1-0-1 done" in t for t in telegram.sent_texts(FIRST_CHAT)), timeout=30
    )
    await telegram.wait_for(lambda: "edited" in telegram.messages[question_id], timeout=10)
    edited = telegram.messages[question_id]
    assert f"{ALLOW_ONCE} (on the dashboard)" in edited["text"]
    assert "reply_markup" not in edited["edited"]
    live = await page.get("/waiting/live")
    assert "wants to read" not in live.split("Answered lately")[0]  # none open any more
    assert f"{ALLOW_ONCE} (on the dashboard)" in live

    # The other way round: answered in Telegram first, the page's entry closes saying so.
    fakes.model.reply(calls=[read_config_call(home)])
    before = set(telegram.messages)
    await telegram.push(telegram.message("T1-0-2 read it again", user_id=FIRST_CHAT))
    second = await waiting_ask(page, "wants to read")
    assert second != ask_id
    await telegram.wait_for(
        lambda: any(
            i not in before and "wants to read" in m["text"] for i, m in telegram.messages.items()
        ),
        timeout=10,
    )
    [asked] = [
        i for i, m in telegram.messages.items() if i not in before and "wants to read" in m["text"]
    ]
    buttons = telegram.messages[asked]["params"]["reply_markup"]["inline_keyboard"]
    allow = next(b for row in buttons for b in row if b["text"] == ALLOW_ONCE)
    await telegram.push(telegram.tap(asked, allow["callback_data"], user_id=FIRST_CHAT))
    await telegram.wait_for(
        lambda: any("T1-0-2 done" in t for t in telegram.sent_texts(FIRST_CHAT)), timeout=30
    )
    for _ in range(100):
        live = await page.get("/waiting/live")
        if f"{ALLOW_ONCE} (on telegram:bot01)" in live:
            break
        await asyncio.sleep(0.1)
    assert f"{ALLOW_ONCE} (on telegram:bot01)" in live
    assert second not in live.split("Answered lately")[0]
    closed = await page.post(f"/waiting/{second}/approval", htmx=True, choice=ALLOW_ONCE)
    assert "That question was already" in closed, closed


async def chat_events(page: Page, bot: str, seen: list[str]) -> None:
    """Read the bot's Chat events off the browser's event stream into `seen` (each one's
    HTML)."""
    async with page.client.get(f"{page.url}/events") as stream:
        name, data = "", []
        async for raw in stream.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif not line:
                said = json.loads("\n".join(data)) if name == "chat" else {}
                if said.get("bot") == bot:
                    seen.append(said["html"])
                name, data = "", []


@contextlib.asynccontextmanager
async def chat_stream(page: Page, bot: str) -> AsyncIterator[list[str]]:
    """The events of the bot's chat page, gathered while the block runs (its stream open)."""
    seen: list[str] = []
    reader = asyncio.create_task(chat_events(page, bot, seen))
    try:
        await asyncio.sleep(0.3)  # the stream is open
        yield seen
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_chat_with_a_workers_bot_streams_its_reply_and_stop_stops_it(
    running: tuple[Home, Fakes, Page],
) -> None:
    home, fakes, page = running
    async with chat_stream(page, "bot01") as seen:
        await page.post("/chat/bot01", text="T1-0-5 hello from the page")
        await until(lambda: any("Answer to T1-0-5." in event for event in seen))
        html = await page.get("/chat/bot01")  # stored in bot01's store, by the worker
        assert "hello from the page" in html and "Answer to T1-0-5." in html

        fakes.model.latency = 5.0  # the next reply is still being written at /stop
        await page.post("/chat/bot01", text="T1-0-6 take your time")
        await until(lambda: "T1-0-6" in fakes.model.first_request_at)
        await page.post("/chat/bot01", text="/stop")
        await until(lambda: any("Stopped." in event for event in seen))
        fakes.model.latency = 0.0
        await asyncio.sleep(0.5)
        assert not any("Answer to T1-0-6." in event for event in seen)


async def status_of(page: Page, seen: list[str]) -> str:
    before = len(seen)
    await page.post("/chat/bot01", text="/status")
    await until(lambda: any("Mode:" in event for event in seen[before:]))
    return next(event for event in seen[before:] if "Mode:" in event)


async def test_a_mode_changed_on_trust_reaches_the_worker_and_its_conversations(
    running: tuple[Home, Fakes, Page],
) -> None:
    home, fakes, page = running
    async with chat_stream(page, "bot01") as seen:
        assert "Mode: auto" in await status_of(page, seen)
        await page.post("/trust/mode", bot="bot01", mode="read-only")
        assert "Mode: read-only" in await status_of(page, seen)  # /status in the worker
        assert 'mode = "read-only"' in (home.root / "bots/bot01/bot.toml").read_text()

        # A conversation's own /mode in the worker: listed on Trust, changed from there.
        await page.post("/chat/bot01", text="/mode ask")
        await until(lambda: any("ask" in event and "mode" in event.lower() for event in seen))
        trust = await page.get("/trust")
        found = re.search(r'name="conversation" value="(\d+)"', trust)
        assert found is not None and "bot01" in trust, trust
        await page.post(
            "/trust/conversation-mode", bot="bot01", conversation=found.group(1), mode=""
        )
        assert "Mode: read-only" in await status_of(page, seen)


async def test_a_workers_subagent_is_listed_on_the_workbench_and_stopped_from_it(
    running: tuple[Home, Fakes, Page],
) -> None:
    home, fakes, page = running
    telegram = fakes.telegrams[1]
    spawn = {"action": "spawn", "tasks": [{"goal": "Count the zeppelins", "context": ""}]}
    fakes.model.reply(calls=[("delegate", spawn)])
    fakes.model.latency = 8.0  # the subagent is with the model while the page acts
    await telegram.push(telegram.message("T1-0-7 [sub] count them", user_id=FIRST_CHAT))
    for _ in range(200):
        bench = await page.get("/workbench")
        if "Count the zeppelins" in bench:
            break
        await asyncio.sleep(0.1)
    assert "Count the zeppelins" in bench
    found = re.search(r'action="/workbench/subagent/([\w-]+)/stop"', bench)
    assert found is not None, bench
    await page.post(f"/workbench/subagent/{found.group(1)}/stop")
    fakes.model.latency = 0.0
    for _ in range(100):
        bench = await page.get("/workbench")
        if "Count the zeppelins" not in bench.split("Subagents ended")[0]:
            break
        await asyncio.sleep(0.1)
    assert "Count the zeppelins" not in bench.split("Subagents ended")[0]
    assert f"stop subagent {found.group(1)}" in await page.get("/trust?tool=delegate")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")
async def test_a_workers_approval_appears_live_and_is_answered_in_chromium(
    running: tuple[Home, Fakes, Page],
) -> None:
    from playwright.async_api import expect

    home, fakes, page = running
    telegram = fakes.telegrams[1]
    async with logged_in_tab(page.url, home.root) as (tab, problems):
        await tab.get_by_role("link", name="Waiting").click()
        await expect(tab.get_by_text("Nothing is waiting for you.")).to_be_visible()
        await asyncio.sleep(0.5)  # the page's event stream is open
        # bot01's Telegram turn (in worker 1) asks; the page shows it without a reload.
        fakes.model.reply(calls=[read_config_call(home)])
        await telegram.push(telegram.message("T1-0-9 read the config", user_id=FIRST_CHAT))
        await expect(tab.get_by_text(re.compile("wants to read"))).to_be_visible()
        await tab.get_by_role("button", name=ALLOW_ONCE).click()
        await expect(tab.get_by_text(f"Answered: {ALLOW_ONCE}.")).to_be_visible()
        await telegram.wait_for(
            lambda: any("T1-0-9 done" in t for t in telegram.sent_texts(FIRST_CHAT)),
            timeout=30,
        )
        await expect(tab.get_by_text("Nothing is waiting for you.")).to_be_visible()
        assert problems == []
