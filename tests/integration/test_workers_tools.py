"""cronjob_manage from a bot of a worker process (issue #24): `atlas run` with `[daemon]
workers = 2`, bot01 served by a real child process. The routine it makes is scheduled by the
home's scheduler at once (the tool's answer names the scheduler's next run, with no word that
routines need the daemon), and `run` starts a run now: the home's scheduler runs it in the worker
and the report reaches the person on Telegram. Real aiogram and openai against the fakes on
127.0.0.1 (the fixture style of tests/integration/test_workers.py)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from atlas.daemon import serve
from atlas.home import Home
from atlas.tools.routines import NOT_RUNNING
from atlas.workers.plan import Placement
from scripts.loadkit import FIRST_CHAT, Fakes
from tests.helpers import worker_fakes

BOTS = 3  # atlas and bot02 in the home's process, bot01 in worker 1


@pytest.fixture
async def fakes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Fakes]:
    async with worker_fakes(monkeypatch, BOTS) as made:
        made.model.keep_requests = True
        yield made


def tool_results(fakes: Fakes) -> list[str]:
    """What the model read back from tools, in order."""
    seen: list[str] = []
    for body in fakes.model.requests:
        for message in body.get("messages", []):
            if message.get("role") == "tool" and message["content"] not in seen:
                seen.append(message["content"])
    return seen


async def say(fakes: Fakes, text: str, answered: Any) -> None:
    """Send bot01 `text` from the first chat; wait until `answered(texts sent there)`."""
    telegram = fakes.telegrams[1]
    await telegram.push(telegram.message(text, user_id=FIRST_CHAT))
    await telegram.wait_for(lambda: answered(telegram.sent_texts(FIRST_CHAT)), timeout=30)


async def test_cronjob_manage_in_a_worker_schedules_at_once_and_runs_now(
    tmp_path: Path, fakes: Fakes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="atlas.daemon")
    root = tmp_path / "home"
    fakes.write_home(root, conversations=1)
    with (root / "config.toml").open("a") as config:
        config.write("\n[daemon]\nworkers = 2\n")
    home = Home(root)
    assert Placement.of(home, 2).owner("bot01") == 1
    stop = asyncio.Event()
    daemon = asyncio.create_task(serve(home, stop=stop))
    try:
        # The scheduler starts once the worker is ready; the daemon then logs "ready".
        await fakes.telegrams[1].wait_for(lambda: "ready; stop with" in caplog.text, timeout=60)
        create = {
            "action": "create",
            "name": "standup",
            "prompt": "Say that the standup is at ten (T1-0-9).",
            "schedule": "every day at 9:30",
        }
        fakes.model.reply(calls=[("cronjob_manage", create)])  # then the fake answers by itself
        await say(fakes, "T1-0-1 remind me of the standup", lambda sent: len(sent) >= 1)
        created = tool_results(fakes)[-1]
        assert created.startswith("Created routine standup"), created
        assert "T09:30" in created and NOT_RUNNING.strip() not in created  # the scheduler's
        fakes.model.reply(calls=[("cronjob_manage", {"action": "run", "job_id": "standup"})])
        await say(
            fakes, "T1-0-2 run it now", lambda sent: any("Answer to T1-0-9." in t for t in sent)
        )
        assert any(result.startswith("Started run ") for result in tool_results(fakes))

        def runs() -> list[tuple[str, str, str]]:
            with sqlite3.connect(home.db_path) as db:
                return list(db.execute("SELECT bot, trigger, status FROM routine_runs"))

        # The run's record is closed just after its report went out: wait for that moment.
        async with asyncio.timeout(20):
            while [status for _, _, status in runs()] == ["running"]:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert runs() == [("bot01", "manual", "ok")]
    finally:
        stop.set()
        await asyncio.wait_for(daemon, 30)
