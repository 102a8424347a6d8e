"""The Workbench page: executor instances (state, folder, account) and subagents, steered and
stopped by the person through the instance's control and the subagent manager, recorded in
the gate's log; refused without the CSRF token; ended subagents paged from atlas.db."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from atlas.agents.services import HomeServices
from atlas.agents.subagents import Subagent
from atlas.dashboard.pages.workbench import ENDED_PER_PAGE, STOPPED_BY_PERSON
from atlas.executors.workbench import Instance
from tests.dashboard_rig import Rig, dashboard_rig


class FakeControl:
    def __init__(self) -> None:
        self.steered: list[str] = []
        self.stopped: list[str] = []

    async def steer(self, message: str) -> str:
        self.steered.append(message)
        return "sent into its running turn"

    async def stop(self, reason: str) -> None:
        self.stopped.append(reason)


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


def services(rig: Rig) -> HomeServices:
    """The daemon's services over a stand-in dispatcher (the page needs only these)."""
    dispatcher = SimpleNamespace(runtime=SimpleNamespace(home=rig.home, audit=rig.audit))
    made = HomeServices(dispatcher)  # type: ignore[arg-type]
    dispatcher.services = made  # type: ignore[attr-defined]
    assert rig.dashboard is not None
    rig.dashboard.dispatcher = dispatcher  # type: ignore[assignment]
    return made


def an_instance(made: HomeServices) -> tuple[Instance, FakeControl]:
    control = FakeControl()
    instance = made.workbench.add(
        Instance(
            "ex-abc123",
            "claude-code",
            "claude-code@work",
            Path("/srv/projects/pier"),
            title="Fix the pier timetable",
            bot="atlas",
            conversation_id=4,
            control=control,
        )
    )
    return instance, control


async def test_instances_show_state_folder_account_and_are_steered_and_stopped(rig: Rig) -> None:
    made = services(rig)
    _, control = an_instance(made)
    csrf = await rig.log_in()
    page = await (await rig.client.get("/workbench")).text()
    assert "ex-abc123" in page and "claude-code@work" in page and "/srv/projects/pier" in page
    assert "running" in page and '<label for="steer-ex-abc123">' in page
    answer = await rig.client.post(
        "/workbench/instance/ex-abc123/steer",
        data={"csrf": csrf, "message": "Use the summer timetable."},
        allow_redirects=False,
    )
    assert answer.status == 303 and control.steered == ["Use the summer timetable."]
    await rig.client.post("/workbench/instance/ex-abc123/stop", data={"csrf": csrf})
    assert control.stopped == [STOPPED_BY_PERSON]
    summaries = [d["summary"] for d in await rig.audit.recent_decisions()]
    assert summaries[0].startswith("stop ex-abc123 (claude-code@work")
    assert summaries[1].endswith(": Use the summer timetable.")
    made.workbench.update("ex-abc123", state="stopped")
    page = await (await rig.client.get("/workbench")).text()
    assert 'action="/workbench/instance/ex-abc123/stop"' not in page  # ended: no controls
    gone = await rig.client.post("/workbench/instance/ex-abc123/stop", data={"csrf": csrf})
    assert gone.status == 409


async def test_a_running_subagent_is_steered_and_stopped(rig: Rig) -> None:
    made = services(rig)
    sub = Subagent("sa-1", "b-1", "atlas", 4, "Count the zeppelins", "")
    sub.status = "running"
    sub.task = asyncio.create_task(asyncio.sleep(30))
    made.subagents._subagents[sub.id] = sub  # as spawn keeps it
    csrf = await rig.log_in()
    page = await (await rig.client.get("/workbench")).text()
    assert "sa-1" in page and "Count the zeppelins" in page
    await rig.client.post(
        "/workbench/subagent/sa-1/steer", data={"csrf": csrf, "message": "Only the red ones."}
    )
    assert sub.steering == ["Only the red ones."]
    await rig.client.post("/workbench/subagent/sa-1/stop", data={"csrf": csrf})
    assert sub.stop_reason == STOPPED_BY_PERSON
    await asyncio.gather(sub.task, return_exceptions=True)
    assert sub.task.cancelled()


async def test_steer_and_stop_without_the_csrf_token_are_refused(rig: Rig) -> None:
    made = services(rig)
    _, control = an_instance(made)
    await rig.log_in()
    for action in ("steer", "stop"):
        answer = await rig.client.post(
            f"/workbench/instance/ex-abc123/{action}", data={"message": "x"}
        )
        assert answer.status == 403
    assert control.steered == [] and control.stopped == []


async def test_ended_subagents_are_paged_and_no_daemon_is_said(rig: Rig) -> None:
    def fill(db) -> None:  # type: ignore[no-untyped-def]
        db["delegations"].insert_all(
            {
                "id": f"sa-{n:03}",
                "bot": "atlas",
                "parent_conversation_id": 1,
                "goal": f"goal {n:03}",
                "status": "done",
                "created_at": f"2026-01-01T00:{n // 60:02}:{n % 60:02}",
                "ended_at": "2026-01-01T01:00:00",
            }
            for n in range(ENDED_PER_PAGE + 3)
        )

    await rig.audit.call(fill)
    await rig.log_in()
    first = await (await rig.client.get("/workbench")).text()
    assert "does not serve this page" in first
    assert f"goal {ENDED_PER_PAGE + 2:03}" in first and "goal 000" not in first
    assert 'rel="next"' in first
    second = await (await rig.client.get("/workbench?page=2")).text()
    assert "goal 000" in second
