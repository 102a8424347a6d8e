"""Screenshots of every dashboard page, for docs/dashboard.md, taken in the system Chromium.

    uv run python scripts/dashboard_screenshots.py [--out docs/images] [--chrome /usr/bin/chromium]

Builds a small home like scripts/bench_dashboard.py's (3 bots, 3,000 messages, a routine, gate
decisions, a channel up and one reconnecting, an approval waiting), serves the dashboard on a
free loopback port, logs in through a one-time link as a person would, and saves each page at a
desktop size (1200 x 800) as `dashboard-<page>.png`, and Home, a conversation, Usage, Waiting
(an approval and a question set waiting), Chat (a reply being written), Routines and Workbench
at a phone's (390 x 844) as `dashboard-<page>-phone.png`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from atlas.channels.supervisor import ChannelHealth
from atlas.dashboard.app import build_app
from atlas.dashboard.auth import Signer, issue_login_token, read_secret
from atlas.dashboard.chat_channel import web_address
from atlas.dashboard.context import Dashboard
from atlas.home import Bot
from atlas.routines.store import RoutineStore
from atlas.store.conversations import ConversationStore
from atlas.store.home_db import HomeStore
from atlas.tools.registry import ConversationState
from scripts.bench_dashboard import fill_decisions, fill_store, make_big_home

PAGES = {
    "home": "/",
    "conversations": "/conversations?bot=atlas",
    "search": "/conversations?q=quartzite",
    "conversation": "/conversations/atlas/5",
    "trust": "/trust",
    "usage": "/usage?days=30",
    "waiting": "/waiting",
    "chat": "/chat/atlas",
    "routines": "/routines",
    "routine": "/routines/1",
    "workbench": "/workbench",
    "memory": "/memory/user",
}

PHONE_PAGES = ("home", "conversation", "usage", "waiting", "chat", "routines", "workbench")


async def shoot(out: Path, chrome: str, root: Path) -> list[Path]:
    import random

    from playwright.async_api import async_playwright

    home = make_big_home(root, 3)
    rng = random.Random(7)
    stores: dict[str, ConversationStore] = {}
    for name, bot in home.bots.items():
        stores[name] = await fill_store(bot, 1000, rng, 0)
    audit = HomeStore(home.db_path)
    await fill_decisions(audit, list(home.bots), rng)
    routines = RoutineStore(audit)
    await routines.create("atlas", "morning-brief", "Brief me", "weekdays at 8am", None)
    await routines.create("bot1", "backup-check", "Check backups", "every 6 hours", None)
    healths = {"telegram:atlas": ChannelHealth("telegram:atlas"), "slack:bot1": ChannelHealth("s")}
    healths["telegram:atlas"].up("polling")
    healths["slack:bot1"].reconnecting("ClientConnectorError: connection refused; restart 2")
    waiting = ConversationState()
    waiting.pending_asks.append("run_command wants to run `git push origin main`. Allow?")

    async def open_store(bot: Bot) -> ConversationStore:
        return stores[bot.name]

    dashboard = Dashboard(
        home,
        open_store,
        audit,
        Signer(read_secret(home.root)),
        channel_health=lambda: healths,
        conversation_states=lambda: {("atlas", 3): waiting},
    )
    asking = await put_questions(dashboard, stores["atlas"])
    await fill_routines_workbench_memory(dashboard)
    runner = web.AppRunner(build_app(dashboard))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    saved = []
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=chrome, args=["--no-sandbox", "--disable-gpu"]
            )
            for suffix, viewport in (("", (1200, 800)), ("-phone", (390, 844))):
                context = await browser.new_context(
                    viewport={"width": viewport[0], "height": viewport[1]},
                    device_scale_factor=1 if not suffix else 2,
                )
                page = await context.new_page()
                await page.goto(f"{base}/login?token={issue_login_token(home.root)}")
                await page.get_by_role("button", name="Log in").click()
                await page.wait_for_url(f"{base}/")
                for name, path in PAGES.items():
                    if suffix and name not in PHONE_PAGES:
                        continue
                    await page.goto(base + path)
                    if name == "conversation":
                        await page.locator("details summary").first.click()
                    if name == "chat":  # a reply being written, streamed into the open tab
                        await page.wait_for_timeout(300)
                        assert dashboard.chat is not None
                        dashboard.chat.feed(web_address("atlas")).partial = ""  # each size anew
                        await dashboard.chat.stream(web_address("atlas"), CHAT_PARTIAL)
                        await page.get_by_text("writing").wait_for()
                    target = out / f"dashboard-{name}{suffix}.png"
                    await page.screenshot(path=str(target))
                    saved.append(target)
                await context.close()
            await browser.close()
    finally:
        for task in asking:
            task.cancel()
        await runner.cleanup()
        for store in stores.values():
            await store.close()
        await audit.close()
    return saved


async def fill_routines_workbench_memory(dashboard: Dashboard) -> None:
    """Runs of the morning brief, an executor instance and ended subagents on the workbench
    (the daemon's services over a stand-in dispatcher), and a USER.md."""
    from types import SimpleNamespace

    from atlas.agents.services import HomeServices
    from atlas.executors.workbench import Instance
    from atlas.routines.store import RunResult

    home, audit = dashboard.home, dashboard.audit
    routines = RoutineStore(audit)
    brief = await routines.find("atlas", "morning-brief")
    assert brief is not None
    for status, text in (
        ("ok", "Three meetings; rain after 4pm."),
        ("silent", ""),
        ("ok", "A quiet day."),
    ):
        run_id = await routines.start_run(brief, "schedule", None)
        await routines.finish_run(
            run_id, RunResult(status, text=text, input_tokens=900, output_tokens=60)
        )  # type: ignore[arg-type]
    dispatcher = SimpleNamespace(runtime=SimpleNamespace(home=home, audit=audit))
    services = HomeServices(dispatcher)  # type: ignore[arg-type]
    dispatcher.services = services  # type: ignore[attr-defined]
    dashboard.dispatcher = dispatcher  # type: ignore[assignment]

    class Idle:
        async def steer(self, message: str) -> str:
            return "queued"

        async def stop(self, reason: str) -> None: ...

    services.workbench.add(Instance("ex-4f2a91", "claude-code", "claude-code@work", Path("/home/you/projects/shop"),
                                    title="Add the invoice export", bot="atlas", conversation_id=3, control=Idle()))  # fmt: skip
    services.workbench.add(Instance("ex-77c0de", "claude-code", "claude-code@personal", Path("/home/you/projects/blog"),
                                    owner="person", title="Your session", control=Idle(), state="asking",
                                    detail="waits for you: allow `npm publish`?"))  # fmt: skip

    def ended(db) -> None:  # type: ignore[no-untyped-def]
        db["delegations"].insert_all(
            {"id": f"sa-{n}", "bot": "atlas", "parent_conversation_id": 3, "goal": goal,
             "status": "done", "input_tokens": 4000, "output_tokens": 300,
             "created_at": f"2026-01-0{n}T09:00:00", "ended_at": f"2026-01-0{n}T09:04:00"}
            for n, goal in enumerate(("Compare three train fares", "Summarise the museum hours"), 1)
        )  # fmt: skip

    await audit.call(ended)
    home.user_profile_path.write_text(
        "Prefers short answers.\n\nLives in Lyon; works 9-17 on weekdays.\n", encoding="utf-8"
    )


CHAT_PARTIAL = "Here is the plan for Thursday: the train at 8:12, then the museum "


async def put_questions(dashboard: Dashboard, store: ConversationStore) -> list[asyncio.Task]:  # type: ignore[type-arg]
    """An approval and an ask_user set waiting (on channels that never answer), and a chat."""
    from atlas.channels.base import Address, Question
    from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT, BrowserChannel
    from atlas.providers.base import Message

    chat = await store.conversation(WEB_CHANNEL, WEB_CHAT, bot="atlas")
    await store.append(chat.id, Message("user", "What should we do on Thursday?"))
    await store.append(chat.id, Message("assistant", "Shall I look up the trains and museums?"))
    await store.append(chat.id, Message("user", "Yes please, and keep it cheap."))
    dashboard.chat = BrowserChannel()
    never = asyncio.Event()

    async def no_answer() -> object:
        await never.wait()

    telegram = Address("atlas", "telegram:atlas", "42")
    approval = dashboard.asks.approval(
        telegram,
        3,
        "run_command wants to run `git push origin main`. Allow?",
        ["allow once", "allow for this conversation", "deny"],
        no_answer,  # type: ignore[arg-type]
    )
    questions = [
        Question("Which database for the new app?", ("PostgreSQL", "SQLite")),
        Question("Which days can it run?", ("Mon", "Tue", "Wed", "Thu"), multi_select=True),
    ]
    asked = dashboard.asks.question_set(
        Address("bot1", "slack:bot1", "C1"),
        8,
        questions,
        no_answer,  # type: ignore[arg-type]
    )
    tasks = [asyncio.create_task(approval), asyncio.create_task(asked)]
    await asyncio.sleep(0)
    return tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/images")
    parser.add_argument("--chrome", default="/usr/bin/chromium")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="atlas-screenshots-") as folder:
        saved = asyncio.run(shoot(Path(args.out), args.chrome, Path(folder) / "home"))
    for path in saved:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
