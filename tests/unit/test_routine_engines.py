"""Routines and their runs, the same calls on both engines: atlas.db (the embedded default)
and the home's PostgreSQL database. A scheduled fire is keyed by (routine, scheduled time):
a second start of the same slot is told `AlreadyFired`, so two schedulers firing a routine
at once run it once; on PostgreSQL, two processes racing for many slots."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.providers.scripted import Reply, ScriptedModel
from atlas.routines.engine import RoutineEngine
from atlas.routines.scheduler import RoutineScheduler
from atlas.routines.store import AlreadyFired, RoutineError, RoutineStore, RunResult, Target
from atlas.store.home_db import HomeStore
from atlas.store.pg.routines import PgRoutineStore
from atlas.store.pg.server import PgServer
from tests.helpers import close_test_stores
from tests.unit.test_routines import TARGET, home_with, rig_for

SLOT = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def routines(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RoutineEngine]:
    if request.param == "sqlite":
        home_store = HomeStore(tmp_path / "atlas.db")
        yield RoutineStore(home_store)
        await home_store.close()
        return
    async with PgServer(request.getfixturevalue("postgres_url")) as server:
        yield PgRoutineStore(server)


def test_both_are_routine_engines(tmp_path: Path) -> None:
    assert isinstance(RoutineStore(HomeStore(tmp_path / "atlas.db")), RoutineEngine)
    assert isinstance(PgRoutineStore(PgServer("postgresql://x@127.0.0.1/x")), RoutineEngine)


async def test_routines_are_made_found_changed_and_removed(routines: RoutineEngine) -> None:
    made = await routines.create("atlas", "digest", "Sum up the day.", "every 1h", TARGET)
    assert (made.name, made.target, made.paused, made.source) == (
        "digest",
        TARGET,
        False,
        "tool",
    )
    with pytest.raises(RoutineError, match="already has a routine named 'digest'"):
        await routines.create("atlas", "digest", "again", "every 2h", None)
    assert (await routines.find("atlas", "digest")) == made
    assert (await routines.find(None, str(made.id))) == made
    before = await routines.signature()
    changed = await routines.update(made.id, schedule="every 2h", target=None, paused=True)
    assert (changed.schedule, changed.target, changed.paused) == ("every 2h", None, True)
    assert await routines.signature() != before
    other = await routines.create("other", "digest", "p", "every 1h", Target("fake", "c", user="u"))
    assert [r.bot for r in await routines.all()] == ["atlas", "other"]
    assert [r.name for r in await routines.all("other")] == ["digest"]
    assert other.target == Target("fake", "c", user="u")
    assert await routines.remove(made.id) and not await routines.remove(made.id)
    assert await routines.get(made.id) is None


async def test_runs_are_recorded_finished_and_closed_at_a_start(routines: RoutineEngine) -> None:
    routine = await routines.create("atlas", "digest", "p", "every 1h", TARGET)
    done = await routines.start_run(routine, "schedule", SLOT)
    assert (await routines.running(routine.id)).id == done  # type: ignore[union-attr]
    await routines.finish_run(done, RunResult("ok", "delivered to fake:chat-1", text="x" * 5000))
    cut = await routines.start_run(routine, "manual", None)
    missed = await routines.record_missed(routine, SLOT + timedelta(hours=1), "asleep")
    closed = await routines.close_interrupted_runs("interrupted")
    assert [run.id for run in closed] == [cut]
    runs = await routines.runs(routine.id)
    assert [(r.id, r.status) for r in runs] == [
        (missed, "missed"),
        (cut, "failed"),
        (done, "ok"),
    ]
    finished = await routines.get_run(done)
    assert finished is not None and len(finished.text) == 2000
    assert finished.scheduled_for == SLOT.isoformat()
    await routines.record_delivery(cut, "told")
    assert await routines.close_interrupted_runs("interrupted") == []
    assert await routines.owed_reports(SLOT - timedelta(days=1)) == []


async def test_a_slot_fires_once_a_manual_run_any_time(routines: RoutineEngine) -> None:
    routine = await routines.create("atlas", "digest", "p", "every 1h", TARGET)
    first = await routines.start_run(routine, "schedule", SLOT)
    with pytest.raises(AlreadyFired, match="has run already"):
        await routines.start_run(routine, "schedule", SLOT)
    with pytest.raises(AlreadyFired):
        await routines.start_run(routine, "catch-up", SLOT)  # a catch-up of the same slot
    with pytest.raises(AlreadyFired):
        await routines.record_missed(routine, SLOT, "late")  # nor recorded missed after it
    later = await routines.start_run(routine, "schedule", SLOT + timedelta(hours=1))
    manual = [await routines.start_run(routine, "manual", SLOT) for _ in range(2)]
    other = await routines.create("atlas", "other", "p", "every 1h", TARGET)
    await routines.start_run(other, "schedule", SLOT)  # another routine's slot is its own
    ids = [run.id for run in await routines.runs(routine.id)]
    assert sorted(ids) == sorted([first, later, *manual])


async def test_two_schedulers_firing_one_slot_run_it_once(home_path: Path) -> None:
    """The scheduler itself: two of them (the second as another process would be) fire the
    same slot; the routine runs once, the second is told it fired already."""
    moment = datetime.now(UTC)
    model = ScriptedModel(Reply("the digest"))
    rig = rig_for(home_with(home_path), model, clock=lambda: moment)
    second = RoutineScheduler(rig.home, rig.runtime.audit, rig.dispatcher, clock=lambda: moment)
    try:
        routine = await rig.scheduler.store.create(
            "atlas",
            "digest",
            "p",
            "every 1h",
            TARGET,
            armed_at=(moment - timedelta(hours=2)).isoformat(),
        )
        await asyncio.gather(rig.scheduler._on_slot(routine.id), second._on_slot(routine.id))
        await rig.scheduler.wait_runs()
        runs = await rig.scheduler.store.runs(routine.id)
        assert [run.status for run in runs] == ["ok"]
        assert [text for _, text in rig.channel.sent] == ["the digest"]
        model.assert_complete()
    finally:
        await rig.dispatcher.shutdown()
        await rig.runtime.close()
        await close_test_stores()


# ------------------------------------------------------------ PostgreSQL: several processes


@pytest.mark.postgres
async def test_two_stores_racing_for_the_same_slots_fire_each_once(postgres_url: str) -> None:
    async with PgServer(postgres_url) as one, PgServer(postgres_url) as two:
        stores = PgRoutineStore(one), PgRoutineStore(two)
        routine = await stores[0].create("atlas", "digest", "p", "every 1h", TARGET)
        slots = [SLOT + timedelta(hours=n) for n in range(40)]

        async def fire(store: PgRoutineStore, slot: datetime) -> int | None:
            try:
                return await store.start_run(routine, "schedule", slot)
            except AlreadyFired:
                return None

        outcomes = await asyncio.gather(*(fire(store, slot) for slot in slots for store in stores))
        runs = await stores[1].runs(routine.id, limit=100)
    started = [run_id for run_id in outcomes if run_id is not None]
    assert len(started) == len(slots)  # one winner per slot, one loser
    assert sorted(run.scheduled_for for run in runs) == [slot.isoformat() for slot in slots]


@pytest.mark.postgres
async def test_two_schedulers_on_postgresql_run_a_slot_once(
    home_path: Path, postgres_url: str
) -> None:
    moment = datetime.now(UTC)
    model = ScriptedModel(Reply("the digest"))
    async with PgServer(postgres_url) as one, PgServer(postgres_url) as two:
        rig = rig_for(home_with(home_path), model, clock=lambda: moment, store=PgRoutineStore(one))
        second = RoutineScheduler(
            rig.home, rig.runtime.audit, rig.dispatcher, clock=lambda: moment,
            store=PgRoutineStore(two),
        )  # fmt: skip
        try:
            routine = await rig.scheduler.store.create(
                "atlas", "digest", "p", "every 1h", TARGET,
                armed_at=(moment - timedelta(hours=2)).isoformat(),
            )  # fmt: skip
            await asyncio.gather(rig.scheduler._on_slot(routine.id), second._on_slot(routine.id))
            await asyncio.gather(rig.scheduler.wait_runs(), second.wait_runs())
            runs = await second.store.runs(routine.id)
            assert [run.status for run in runs] == ["ok"]
            assert [text for _, text in rig.channel.sent] == ["the digest"]
        finally:
            await rig.dispatcher.shutdown()
            await rig.runtime.close()
            await close_test_stores()
