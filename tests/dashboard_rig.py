"""The dashboard under aiohttp's test client over a home made by make_home: the app, a store
opener, atlas.db, and a person who logs in through a link (tests/unit/test_dashboard_*.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from atlas.channels.supervisor import ChannelHealth
from atlas.dashboard.app import build_app
from atlas.dashboard.auth import Signer, issue_login_token
from atlas.dashboard.context import Dashboard
from atlas.home import Home
from atlas.providers.base import Message, ToolCall, Usage
from atlas.store.home_db import HomeStore
from atlas.tools.registry import ConversationState
from tests.helpers import close_test_stores, make_home, open_store_for_tests

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
CHROMIUM = Path("/usr/bin/chromium")  # Debian's: Playwright cannot download one here


@asynccontextmanager
async def logged_in_tab(base: str, home_root: Path) -> AsyncIterator[tuple[Any, list[str]]]:
    """Real Chromium with one tab logged in to the dashboard at `base` through a one-time
    link, and the page's problems as they come: console errors (a CSP violation shows there)
    and uncaught script errors. The browser is closed at the end."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            await page.goto(f"{base}/login?token={issue_login_token(home_root)}")
            await page.get_by_role("button", name="Log in").click()
            yield page, problems
        finally:
            await browser.close()


async def store_conversation(home: Home, bot: str = "atlas") -> int:
    """A conversation with a question, a tool call and its result, and an answer."""
    store = await open_store_for_tests(home.bot(bot))
    conversation = await store.conversation("console", "c1", bot=bot, title="Plans")
    await store.append(conversation.id, Message("user", "Where is the quarterly zeppelin report?"))
    call = ToolCall("call-1", "read_file", '{"path": "reports/q3.md"}')
    await store.append(
        conversation.id,
        Message("assistant", "", tool_calls=[call]),
        usage=Usage(input_tokens=1200, output_tokens=30),
        model="fake/test-model",
    )
    await store.append(
        conversation.id,
        Message("tool", "Q3: the zeppelin fleet grew by two.", tool_call_id="call-1"),
    )
    await store.append(
        conversation.id,
        Message("assistant", "It is in reports/q3.md: the fleet grew by two."),
        usage=Usage(input_tokens=1300, output_tokens=40),
        model="fake/test-model",
    )
    return conversation.id


class Rig:
    def __init__(self, home: Home, client: TestClient, audit: HomeStore) -> None:
        self.home, self.client, self.audit = home, client, audit
        self.states: dict[tuple[str, int], ConversationState] = {}
        self.health: dict[str, ChannelHealth] = {}
        self.dashboard: Dashboard | None = None

    async def log_in(self) -> str:
        """Log in through a fresh link; the CSRF token of the session."""
        token = issue_login_token(self.home.root)
        answer = await self.client.post("/login", data={"token": token}, allow_redirects=False)
        assert answer.status == 303
        page = await self.client.get("/")
        return CSRF.search(await page.text()).group(1)  # type: ignore[union-attr]


@asynccontextmanager
async def dashboard_rig(
    home_path: Path, *, reads: Any = None, open_store: Any = None
) -> AsyncIterator[Rig]:
    """The app over a new home at `home_path`, served on loopback; closed on leaving. `reads`:
    the home's shared state read from another engine than atlas.db (a DashboardReads);
    `open_store`: the bots' stores from another engine than their files."""
    home = make_home(home_path)
    audit = HomeStore(home.db_path)
    signer = Signer.for_home(home.root)
    holder: dict[str, Rig] = {}
    dashboard = Dashboard(
        home,
        open_store or open_store_for_tests,
        audit,
        signer,
        channel_health=lambda: holder["rig"].health,
        conversation_states=lambda: holder["rig"].states,
        reads=reads,
    )
    client = TestClient(TestServer(build_app(dashboard), host="127.0.0.1"))
    await client.start_server()
    holder["rig"] = Rig(home, client, audit)
    holder["rig"].dashboard = dashboard
    try:
        yield holder["rig"]
    finally:
        await client.close()
        await audit.close()
        await close_test_stores()
