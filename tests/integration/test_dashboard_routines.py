"""In real Chromium, against `atlas run` (serve) over the OpenAI fake: a person runs a routine
now on the Routines page and sees its outcome (the model's answer) appear in its run history
without a reload."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.routines.store import RoutineStore
from atlas.store.home_db import HomeStore
from tests.dashboard_rig import CHROMIUM, logged_in_tab

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium installed")


async def test_run_a_routine_now_and_see_its_outcome(home_path: Path) -> None:
    from playwright.async_api import expect

    from atlas.daemon import serve
    from atlas.dashboard.server import running_url
    from atlas.home import Home
    from tests.fakes.model_servers import FakeOpenAIServer
    from tests.helpers import make_home

    async with FakeOpenAIServer() as server:
        home = make_home(home_path, base_url=server.base_url)
        audit = HomeStore(home.db_path)
        await RoutineStore(audit).create(
            "atlas", "pier-check", "Check the pier and report.", "every day at 18:00", None
        )
        await audit.close()
        server.reply(text="The pier is calm; two zeppelins moored.", delay=2.5)
        stop = asyncio.Event()
        task = asyncio.create_task(serve(Home(home_path), stop=stop))
        try:
            for _ in range(400):
                if running_url(home_path) or task.done():
                    break
                await asyncio.sleep(0.05)
            url = running_url(home_path)
            assert url is not None, task.exception() if task.done() else "no URL"
            async with logged_in_tab(url, home.root) as (page, problems):
                await page.get_by_role("link", name="Routines").click()
                await expect(page.get_by_role("heading", name="Routines")).to_be_visible()
                await expect(page.get_by_text("every day at 18:00")).to_be_visible()
                run = page.get_by_role("button", name="Run pier-check now")
                await run.focus()
                await page.keyboard.press("Enter")  # by keyboard
                await expect(page.get_by_role("status")).to_contain_text("started")
                runs = page.locator("table.runs")
                # The model takes 2.5 s: the page shows the run going on, then its outcome
                # without a reload (htmx fetches the history again while a run is running).
                await expect(runs.locator("td.verdict").first).to_have_text("running")
                await expect(runs).to_contain_text(
                    "The pier is calm; two zeppelins moored.", timeout=15_000
                )
                await expect(runs.locator("td.verdict").first).to_have_text("ok")
                await expect(runs).to_contain_text("manual")
                assert problems == []
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
