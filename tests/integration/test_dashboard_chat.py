"""Chat in real Chromium: the person writes to a bot and sees the reply stream in (half of it
first, then the whole), without a reload, under the dashboard's CSP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.dashboard.auth import issue_login_token
from atlas.providers.scripted import Reply
from tests.dashboard_rig import CHROMIUM, logged_in_tab
from tests.unit.test_dashboard_chat import chat_rig

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")


async def test_chat_with_a_bot_and_see_the_reply_stream(home_path: Path) -> None:
    from playwright.async_api import expect

    async with chat_rig(home_path) as rig:
        base = str(rig.client.make_url("")).rstrip("/")
        rig.model.add(Reply("The zeppelin leaves at 14:05 from pier three."))
        async with logged_in_tab(base, rig.home.root) as (page, problems):
            await page.get_by_role("link", name="Chat").click()
            await expect(page.get_by_role("heading", name="Chat with atlas")).to_be_visible()
            assert rig.dashboard.chat is not None
            for _ in range(100):  # until the page's event stream is open
                if rig.dashboard.events.streams:
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


async def test_the_daemon_serves_the_chat_over_a_streaming_model(home_path: Path) -> None:
    """`atlas run` (serve) attaches the chat to its dispatcher: a message posted on the page is
    answered by the model (the OpenAI fake, streaming) and the tab's stream gets the reply."""
    import re

    import aiohttp

    from atlas.daemon import serve
    from atlas.dashboard.server import running_url
    from atlas.home import Home
    from tests.fakes.model_servers import FakeOpenAIServer
    from tests.helpers import make_home
    from tests.unit.test_dashboard_chat import next_event

    async with FakeOpenAIServer() as server:
        home = make_home(home_path, base_url=server.base_url)
        server.reply(text="Pier three, at five past two.")
        stop = asyncio.Event()
        task = asyncio.create_task(serve(Home(home_path), stop=stop))
        try:
            for _ in range(400):
                if running_url(home_path) or task.done():
                    break
                await asyncio.sleep(0.05)
            url = running_url(home_path)
            assert url is not None
            jar = aiohttp.CookieJar(unsafe=True)  # a cookie of 127.0.0.1 (an IP) kept
            async with aiohttp.ClientSession(cookie_jar=jar) as client:
                token = issue_login_token(home.root)
                await client.post(f"{url}/login", data={"token": token})
                page = await (await client.get(f"{url}/chat/atlas")).text()
                csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
                assert "needs the running daemon" not in page
                async with client.get(f"{url}/events") as stream:
                    await client.post(f"{url}/chat/atlas", data={"text": "Where?", "csrf": csrf})
                    name, data = await next_event(stream)  # type: ignore[arg-type]
                    while name != "message" or "assistant" not in data:
                        name, data = await next_event(stream)  # type: ignore[arg-type]
                    assert "Pier three, at five past two." in data
            assert server.requests[0]["stream"] is True  # the reply was streamed
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)


async def test_a_chat_turn_cut_short_by_a_restart_is_resumed_by_the_daemon(
    home_path: Path,
) -> None:
    """The Chat's channel is there before recovery runs: a message left unanswered in the
    browser chat (the daemon stopped mid-turn) is answered at the next start."""
    from atlas.daemon import serve
    from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT
    from atlas.dashboard.server import running_url
    from atlas.home import Home
    from atlas.providers.base import Message
    from atlas.store.conversations import ConversationStore
    from tests.fakes.model_servers import FakeOpenAIServer
    from tests.helpers import make_home

    async with FakeOpenAIServer() as server:
        home = make_home(home_path, base_url=server.base_url)
        async with ConversationStore(home.main_bot.db_path) as store:
            chat = await store.conversation(WEB_CHANNEL, WEB_CHAT, bot="atlas")
            await store.append(chat.id, Message("user", "Where does the zeppelin leave from?"))
        server.reply(text="From pier three.")
        stop = asyncio.Event()
        task = asyncio.create_task(serve(Home(home_path), stop=stop))
        try:
            for _ in range(400):
                if (running_url(home_path) and server.requests) or task.done():
                    break
                await asyncio.sleep(0.05)
            assert server.requests, task.exception() if task.done() else "never resumed"
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        async with ConversationStore(home.main_bot.db_path) as store:
            said = [m.content for m in await store.history(chat.id)]
        assert "From pier three." in said


async def test_a_replys_tool_calls_stay_folded_after_it_ends_and_after_a_reload(
    home_path: Path,
) -> None:
    from playwright.async_api import expect

    from atlas.tools.registry import ToolRegistry
    from tests.integration.test_dashboard_chat_history import find_pier

    async with chat_rig(home_path, ToolRegistry([find_pier])) as rig:
        base = str(rig.client.make_url("")).rstrip("/")
        rig.model.add(
            Reply(calls=[("find_pier", {"ship": "zeppelin"})]),
            Reply("It leaves from pier three."),
        )
        async with logged_in_tab(base, rig.home.root) as (page, problems):
            await page.goto(f"{base}/chat/atlas")
            for _ in range(100):  # until the page's event stream is open
                if rig.dashboard.events.streams:
                    break
                await asyncio.sleep(0.05)
            await page.get_by_label("Message to atlas").fill("Where does it leave?")
            await page.get_by_role("button", name="Send").click()
            reply = page.locator("#chat-reply")
            await expect(reply).to_contain_text("find_pier")  # live, while the turn runs
            rig.model.release.set()
            log = page.locator("#chat-log")
            await expect(log).to_contain_text("It leaves from pier three.")
            await expect(reply).not_to_contain_text("find_pier")  # the finished one is in the log

            async def the_call_is_folded_with_its_result() -> None:
                call = log.locator("details.tool-call")
                await expect(call).to_have_count(1)
                await expect(call.locator("summary")).to_contain_text('find_pier ship="zeppelin"')
                result = call.locator("pre.result")
                await expect(result).to_have_count(1)  # stored, or loaded in place when live
                await expect(result).to_be_hidden()  # folded
                await call.locator("summary").click()
                await expect(result).to_be_visible()
                await expect(result).to_have_text("<b>Pier three</b> for the zeppelin, at 14:05")
                await expect(call.locator("pre.result b")).to_have_count(0)  # text, not HTML

            await the_call_is_folded_with_its_result()  # its stored result loaded in place
            await page.reload()
            await the_call_is_folded_with_its_result()
            assert problems == []
