"""The dashboard's ops in a worker process (atlas/workers/dashboard_ops.py), over a real socket
pair and Elsewhere as the home's process has it: the Workbench lists a worker's executor
instance and subagent and steers and stops them there (recorded in the gate's log); a mode
changed on Trust reaches the worker's copy of the bot; a conversation's /mode in the worker is
listed on Trust and changed from it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from atlas.agents.services import HomeServices
from atlas.agents.subagents import Subagent
from atlas.dashboard.pages.workbench import STOPPED_BY_PERSON
from atlas.home import Home
from atlas.tools.registry import ConversationState
from atlas.workers.dashboard_ops import serve_dashboard_ops
from atlas.workers.link import Link, socket_pair
from atlas.workers.plan import Placement
from atlas.workers.routing import Elsewhere
from tests.dashboard_rig import Rig, dashboard_rig
from tests.unit.test_dashboard_workbench import an_instance


class Worker:
    """A worker's side: its own Home, services and conversation states."""

    def __init__(self, home: Home, rig: Rig) -> None:
        self.home = home
        self.states: dict[tuple[str, int], ConversationState] = {}
        runtime = SimpleNamespace(
            home=home, audit=rig.audit, conversation_states=lambda: self.states
        )
        self.dispatcher = SimpleNamespace(runtime=runtime)
        self.services = HomeServices(self.dispatcher)  # type: ignore[arg-type]
        self.dispatcher.services = self.services  # type: ignore[attr-defined]


@pytest.fixture
async def linked(home_path: Path) -> AsyncIterator[tuple[Rig, Worker]]:
    async with dashboard_rig(home_path) as rig:
        worker = Worker(Home(home_path), rig)
        home_end, worker_end = socket_pair()
        home_link, worker_link = Link("worker 1"), Link("the home's process")
        serve_dashboard_ops(worker_link, worker.dispatcher, 1)  # type: ignore[arg-type]
        await home_link.open(home_end)
        await worker_link.open(worker_end)

        async def link_of(_share: int) -> Link:
            return home_link

        elsewhere = Elsewhere(Placement((("atlas",), ("scout",))), 0, link_of)
        assert rig.dashboard is not None
        home_runtime = SimpleNamespace(home=rig.home, audit=rig.audit)
        home_services = HomeServices(SimpleNamespace(runtime=home_runtime))  # type: ignore[arg-type]
        rig.dashboard.dispatcher = SimpleNamespace(  # type: ignore[assignment]
            elsewhere=elsewhere, services=home_services
        )
        try:
            yield rig, worker
        finally:
            await worker_link.close()
            await home_link.close()


async def test_a_workers_instance_and_subagent_are_listed_steered_and_stopped(
    linked: tuple[Rig, Worker],
) -> None:
    rig, worker = linked
    _, control = an_instance(worker.services)
    sub = Subagent("sa-9", "b-9", "scout", 3, "Count the zeppelins", "")
    sub.status = "running"
    sub.task = asyncio.create_task(asyncio.sleep(30))
    worker.services.subagents._subagents[sub.id] = sub  # as spawn keeps it
    csrf = await rig.log_in()
    page = await (await rig.client.get("/workbench")).text()
    assert "ex-abc123" in page and "claude-code@work" in page and "/srv/projects/pier" in page
    assert 'action="/workbench/instance/ex-abc123/stop"' in page
    assert "sa-9" in page and "Count the zeppelins" in page
    steer = await rig.client.post(
        "/workbench/instance/ex-abc123/steer",
        data={"csrf": csrf, "message": "Use the summer timetable."},
        allow_redirects=False,
    )
    assert steer.status == 303 and control.steered == ["Use the summer timetable."]
    await rig.client.post("/workbench/instance/ex-abc123/stop", data={"csrf": csrf})
    assert control.stopped == [STOPPED_BY_PERSON]
    await rig.client.post(
        "/workbench/subagent/sa-9/steer", data={"csrf": csrf, "message": "Only the red ones."}
    )
    assert sub.steering == ["Only the red ones."]
    await rig.client.post("/workbench/subagent/sa-9/stop", data={"csrf": csrf})
    assert sub.stop_reason == STOPPED_BY_PERSON
    await asyncio.gather(sub.task, return_exceptions=True)
    summaries = [d["summary"] for d in await rig.audit.recent_decisions()]
    assert summaries[:2] == ["stop subagent sa-9", "steer subagent sa-9: Only the red ones."]
    assert summaries[2].startswith("stop ex-abc123 (claude-code@work")
    gone = await rig.client.post("/workbench/subagent/nobody/stop", data={"csrf": csrf})
    assert gone.status == 409


async def test_a_mode_change_reaches_the_workers_bots_and_its_conversations_modes(
    linked: tuple[Rig, Worker],
) -> None:
    rig, worker = linked
    worker.states[("atlas", 12)] = ConversationState(mode="ask")
    csrf = await rig.log_in()
    answer = await rig.client.post(
        "/trust/mode", data={"csrf": csrf, "bot": "atlas", "mode": "read-only"}
    )
    assert answer.status == 200
    assert worker.home.bot("atlas").settings.mode == "read-only"
    assert worker.home.main_bot.settings.mode == "read-only"  # the cached main bot too
    page = await (await rig.client.get("/trust")).text()
    assert 'name="conversation" value="12"' in page  # the worker's /mode, listed
    await rig.client.post(
        "/trust/conversation-mode",
        data={"csrf": csrf, "bot": "atlas", "conversation": "12", "mode": ""},
    )
    assert worker.states[("atlas", 12)].mode is None
    summaries = [d["summary"] for d in await rig.audit.recent_decisions()]
    assert summaries[0] == "conversation mode ask -> the bot's"
    missing = await rig.client.post(
        "/trust/conversation-mode",
        data={"csrf": csrf, "bot": "atlas", "conversation": "99", "mode": "ask"},
    )
    assert missing.status == 400
