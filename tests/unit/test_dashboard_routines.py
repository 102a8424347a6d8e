"""The Routines page: schedule in words, next fire times as `atlas routines next` computes
them, last outcomes and history (paged); run now, pause and resume through the daemon's
scheduler (cronjob_manage's), recorded; refused without the CSRF token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from atlas.dashboard.pages.routines import RUNS_PER_PAGE, in_words
from atlas.routines.schedule import next_fire_times, parse_schedule
from atlas.routines.store import Routine, RoutineStore, RunResult
from tests.dashboard_rig import Rig, dashboard_rig


class FakeScheduler:
    """The Routines protocol of atlas/tools/services.py, recording what the page asked."""

    def __init__(self, store: RoutineStore) -> None:
        self.store = store
        self.synced = 0
        self.started: list[str] = []

    async def sync(self) -> None:
        self.synced += 1

    async def run_now(self, routine: Routine) -> int:
        self.started.append(routine.name)
        run_id = await self.store.start_run(routine, "manual", None)
        await self.store.finish_run(run_id, RunResult("ok", text="All quiet on the pier."))
        return run_id

    def next_fire_time(self, routine_id: int) -> datetime | None:
        return None

    def is_running(self, routine_id: int) -> bool:
        return False


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


def with_scheduler(rig: Rig) -> FakeScheduler:
    scheduler = FakeScheduler(RoutineStore(rig.audit))
    assert rig.dashboard is not None
    rig.dashboard.dispatcher = SimpleNamespace(services=SimpleNamespace(routines=scheduler))  # type: ignore[assignment]
    return scheduler


async def test_the_list_shows_words_next_times_and_last_outcomes(rig: Rig) -> None:
    store = RoutineStore(rig.audit)
    routine = await store.create("atlas", "standup", "Say hi", "weekdays at 9am", None)
    await store.create("atlas", "cronned", "Tick", "30 9 * * 1-5", None)
    run_id = await store.start_run(routine, "schedule", None)
    await store.finish_run(run_id, RunResult("failed", error="the model was down"))
    await rig.log_in()
    html = await (await rig.client.get("/routines")).text()
    assert "atlas/standup" in html and "weekdays at 9am" in html
    assert "cron: minute 30, hour 9, day *, month *, weekday 1-5" in html
    tz = rig.home.settings.timezone
    schedule = parse_schedule("weekdays at 9am", tz, anchor=routine.armed_at)
    first = next_fire_times(schedule, tz)[0]  # what `atlas routines next` prints
    assert f'datetime="{first.isoformat()}"' in html
    assert 'class="verdict failed">failed' in html
    assert "Run now" in html and "disabled" in html  # no daemon here: run now cannot go
    detail = await (await rig.client.get(f"/routines/{routine.id}")).text()
    assert "the model was down" in detail and "Say hi" in detail


async def test_run_now_goes_through_the_scheduler_and_shows_the_outcome(rig: Rig) -> None:
    scheduler = with_scheduler(rig)
    routine = await scheduler.store.create(
        "atlas", "pier", "Check the pier", "every day at 18:00", None
    )
    csrf = await rig.log_in()
    answer = await rig.client.post(
        f"/routines/{routine.id}/run", data={"csrf": csrf}, allow_redirects=False
    )
    assert (
        answer.status == 303
        and answer.headers["Location"] == f"/routines/{routine.id}?done=started"
    )
    assert scheduler.started == ["pier"]
    detail = await (await rig.client.get(answer.headers["Location"])).text()
    assert "All quiet on the pier." in detail and 'class="verdict ok">ok' in detail
    [decision] = await rig.audit.recent_decisions()
    assert decision["run_kind"] == "dashboard" and decision["answered_by"] == "user"
    assert decision["summary"].startswith("run routine pier now")


async def test_run_now_without_the_daemon_is_refused_and_says_so(rig: Rig) -> None:
    routine = await RoutineStore(rig.audit).create("atlas", "pier", "Check", "every 2h", None)
    csrf = await rig.log_in()
    answer = await rig.client.post(f"/routines/{routine.id}/run", data={"csrf": csrf})
    assert answer.status == 409 and "atlas run" in await answer.text()


async def test_pause_and_resume_change_the_store_sync_the_scheduler_and_are_recorded(
    rig: Rig,
) -> None:
    scheduler = with_scheduler(rig)
    routine = await scheduler.store.create("atlas", "pier", "Check", "every day at 18:00", None)
    csrf = await rig.log_in()
    answer = await rig.client.post(
        f"/routines/{routine.id}/pause", data={"csrf": csrf}, allow_redirects=False
    )
    assert answer.status == 303
    paused = await scheduler.store.get(routine.id)
    assert paused is not None and paused.paused and scheduler.synced == 1
    html = await (await rig.client.get("/routines?done=paused")).text()
    assert "none while paused" in html and "Resume" in html
    await rig.client.post(f"/routines/{routine.id}/resume?back=routine", data={"csrf": csrf})
    resumed = await scheduler.store.get(routine.id)
    assert resumed is not None and not resumed.paused and scheduler.synced == 2
    summaries = [d["summary"] for d in await rig.audit.recent_decisions()]
    assert summaries[:2] == ["resume routine pier", "pause routine pier"]


async def test_posts_without_the_csrf_token_are_refused(rig: Rig) -> None:
    scheduler = with_scheduler(rig)
    routine = await scheduler.store.create("atlas", "pier", "Check", "every 2h", None)
    await rig.log_in()
    for action in ("run", "pause", "resume"):
        answer = await rig.client.post(f"/routines/{routine.id}/{action}", data={})
        assert answer.status == 403
    still = await scheduler.store.get(routine.id)
    assert still is not None and not still.paused and scheduler.started == []


async def test_the_history_is_paged(rig: Rig) -> None:
    store = RoutineStore(rig.audit)
    routine = await store.create("atlas", "often", "Tick", "every 2h", None)
    for n in range(RUNS_PER_PAGE + 2):
        run_id = await store.start_run(routine, "schedule", None)
        await store.finish_run(run_id, RunResult("ok", text=f"tick {n}."))
    await rig.log_in()
    first = await (await rig.client.get(f"/routines/{routine.id}")).text()
    assert (
        f"tick {RUNS_PER_PAGE + 1}." in first and "tick 0." not in first and 'rel="next"' in first
    )
    second = await (await rig.client.get(f"/routines/{routine.id}?page=2")).text()
    assert "tick 0." in second and 'rel="prev"' in second
    assert (await rig.client.get("/routines/999")).status == 404


def test_schedules_in_words() -> None:
    assert in_words("every day at 18:30") == "every day at 18:30"
    assert in_words("2026-07-01T09:00") == "once, at 2026-07-01 09:00"


async def test_the_pages_refetch_their_live_parts_on_the_routines_event(rig: Rig) -> None:
    """No polling: the list, a routine's head and its history listen to `routines` on the
    event stream (and refetch once when it opens); each live part is served alone."""
    store = RoutineStore(rig.audit)
    routine = await store.create("atlas", "slow", "Think", "every 2h", None)
    run_id = await store.start_run(routine, "manual", None)
    await rig.log_in()
    trigger = 'hx-trigger="live:routines from:body, live:open from:body"'
    listing = await (await rig.client.get("/routines?bot=atlas")).text()
    assert '<script src="/static/live.js" defer>' in listing
    assert f'hx-get="/routines/live?bot=atlas&amp;page=1" {trigger}' in listing
    page = await (await rig.client.get(f"/routines/{routine.id}")).text()
    assert "every 2s" not in page
    assert f'hx-get="/routines/{routine.id}/runs?page=1" {trigger}' in page
    assert f'hx-get="/routines/{routine.id}/head" {trigger}' in page
    await store.finish_run(run_id, RunResult("ok", text="Thought it through."))
    part = await (await rig.client.get(f"/routines/{routine.id}/runs")).text()
    assert "Thought it through." in part and "<html" not in part
    await store.update(routine.id, paused=True)
    head = await (await rig.client.get(f"/routines/{routine.id}/head")).text()
    assert '<span class="tag">paused</span>' in head and "Resume slow" in head
    assert "<html" not in head
    live = await (await rig.client.get("/routines/live")).text()
    assert "none while paused" in live and "<html" not in live and "<ul" in live


async def test_a_pause_without_the_daemon_publishes_the_event_itself(rig: Rig) -> None:
    routine = await RoutineStore(rig.audit).create("atlas", "pier", "Check", "every 2h", None)
    csrf = await rig.log_in()
    assert rig.dashboard is not None
    with rig.dashboard.events.subscribe() as queue:
        await rig.client.post(f"/routines/{routine.id}/pause", data={"csrf": csrf})
        names = [queue.get_nowait() for _ in range(queue.qsize())]
    assert "routines" in names


async def test_the_daemons_scheduler_publishes_routines_on_a_runs_start_and_end_and_a_pause(
    home_path: Path,
) -> None:
    """The real scheduler and dispatcher (a scripted model): the dashboard attached to them
    hears `routines` when a run starts, when it has ended (recorded), and on a pause."""
    import asyncio

    from atlas.dashboard.auth import Signer
    from atlas.dashboard.context import Dashboard
    from atlas.providers.scripted import Reply, ScriptedModel
    from tests.helpers import close_test_stores, open_store_for_tests
    from tests.unit.test_routines import home_with, rig_for

    made = rig_for(home_with(home_path), ScriptedModel())
    dashboard = Dashboard(
        made.home, open_store_for_tests, made.runtime.audit, Signer.for_home(made.home.root)
    )

    async def next_routines_event(queue: asyncio.Queue[str]) -> None:
        while await asyncio.wait_for(queue.get(), 5) != "routines":
            pass

    try:
        await made.scheduler.start()
        dashboard.attach(made.dispatcher)  # as the daemon's start_dashboard does
        routine = await made.routine("pier")
        answer = asyncio.Event()
        made.model.add(Reply("The pier is calm.", wait_for=answer))
        with dashboard.events.subscribe() as queue:
            run_id = await made.scheduler.run_now(routine)
            await next_routines_event(queue)  # started
            [run] = await made.scheduler.store.runs(routine.id, limit=1)
            assert run.id == run_id and run.status == "running"
            answer.set()
            await next_routines_event(queue)  # ended, and recorded before the event
            [run] = await made.scheduler.store.runs(routine.id, limit=1)
            assert run.status == "ok" and run.text == "The pier is calm."
            await made.scheduler.store.update(routine.id, paused=True)
            await made.scheduler.sync()  # what cronjob_manage and the page do
            await next_routines_event(queue)
        dashboard.attach(made.dispatcher)  # again: still one listener, one event per change
        with dashboard.events.subscribe() as queue:
            await made.scheduler.sync()
            assert [queue.get_nowait() for _ in range(queue.qsize())] == ["routines"]
    finally:
        await made.scheduler.stop()
        await made.dispatcher.shutdown()
        await made.runtime.close()
        await close_test_stores()
