"""Tools that use atlas.db or the routine scheduler, run by a bot of a worker process: atlas.db
only through the worker's RemoteHomeStore (run.services.home_store), never opened by the tool;
cronjob_manage reaching the home's scheduler over the link (atlas/workers/routines.py), so a
change is scheduled at once and `run` starts a run now, in the worker that serves the bot.
Shares in one event loop over real socketpair links (tests/fakes/worker_rig.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.dispatch import Inbound
from atlas.executors.record import DelegationRecord
from atlas.home import Home
from atlas.newbot import create_bot
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.routines.scheduler import RoutineScheduler
from atlas.tools.delegation_search import delegation_search
from atlas.tools.registry import RunContext
from atlas.tools.routines import cronjob_manage
from atlas.workers.routines import NOT_STARTED
from tests.fakes.agent_fakes import ConversationModel, eventually
from tests.fakes.worker_rig import CHANNEL, Share, Shares, linked_shares, start_scheduler
from tests.helpers import BASE_CONFIG, make_home

PERSON = Address("scout", CHANNEL, "chat-1", user="u1")


class OpenedAtlasDb(AssertionError):
    pass


def no_opening(path: Path) -> None:
    raise OpenedAtlasDb(f"a tool opened {path} itself")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    codex = tmp_path / "codex"
    codex.mkdir()
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        "\n[review]\nenabled = false\n"
        "\n[routines]\npoll_seconds = 3600\n"  # a change is seen at once or not at all
        f'\n[executors.codex]\nenabled = true\naccounts = {{ main = "{codex}" }}\n'
    )
    made = make_home(tmp_path / "home", config=config)
    create_bot(made, "scout", "Scout", "Finds facts on the web.")
    # In a worker a tool must not open atlas.db: only the home's process has it open.
    for module in ("atlas.tools.routines", "atlas.tools.delegation_search"):
        monkeypatch.setattr(f"{module}.HomeStore", no_opening)
    return made


@pytest.fixture
async def shares(home: Home) -> AsyncIterator[Shares]:
    model = ConversationModel(
        {
            "every morning": [
                Reply(
                    calls=[
                        (
                            "cronjob_manage",
                            {
                                "action": "create",
                                "name": "standup",
                                "prompt": "Say that the standup is at ten.",
                                "schedule": "every day at 9:30",
                            },
                        )
                    ]
                ),
                Reply("Made it."),
            ],
            "Say that the standup is at ten.": [Reply("The standup is at ten.")],
        }
    )
    async with linked_shares(home.root, (("atlas",), ("scout",)), [ScriptedModel(), model]) as made:
        yield made


def worker_run(worker: Share) -> RunContext:
    """A run of scout's in the worker, in the conversation with the person (id 1)."""
    return RunContext(
        home=worker.home,
        bot=worker.home.bot("scout"),
        conversation_id=1,
        run_kind="conversation",
        open_store=lambda bot: worker.runtime.store(bot),
        services=worker.services,
    )


async def invoke(worker: Share, **arguments: object) -> str:
    result = await cronjob_manage.invoke(worker_run(worker), arguments)
    assert not result.is_error, result.text
    return result.text


async def test_cronjob_manage_in_a_worker_reaches_the_homes_scheduler_at_once(
    shares: Shares,
) -> None:
    scheduler = await start_scheduler(shares)
    worker = shares[1]
    await worker.dispatcher.submit(Inbound(PERSON, "every morning, remind me of the standup"))
    await worker.dispatcher.wait_idle(PERSON)
    routine = await scheduler.store.find("scout", "standup")
    assert routine is not None and routine.target is not None
    assert routine.target.channel == CHANNEL and routine.target.chat == "chat-1"
    # Scheduled at once, not at the next poll of atlas.db (an hour away here).
    upcoming = await scheduler.next_fire_time(routine.id)
    assert upcoming is not None and (upcoming.hour, upcoming.minute) == (9, 30)
    model = worker.runtime.model
    assert isinstance(model, ConversationModel)
    created = model.requests("every morning")[1].messages[-1].content  # the tool's words
    assert created.startswith("Created routine standup")
    assert f"next run {upcoming.isoformat(timespec='minutes')}" in created
    listed = await invoke(worker, action="list")
    assert f"next run {upcoming.isoformat(timespec='minutes')}" in listed
    assert "daemon" not in listed  # no "not running here"
    paused = await invoke(worker, action="pause", job_id="standup")
    assert "Paused routine standup" in paused
    assert await scheduler.next_fire_time(routine.id) is None  # the job went with the pause
    await invoke(worker, action="resume", job_id="standup")
    assert await scheduler.next_fire_time(routine.id) == upcoming
    # `run` now: the home's scheduler runs it in the worker that serves scout, and the report
    # goes out through that worker's channel.
    started = await invoke(worker, action="run", job_id="standup")
    assert started.startswith("Started run ")
    await scheduler.wait_runs()
    await eventually(lambda: len(worker.channel.texts(PERSON)) == 2, what="the run's report")
    assert worker.channel.texts(PERSON) == ["Made it.", "The standup is at ten."]
    [run] = await scheduler.store.runs(routine.id)
    assert (run.status, run.trigger) == ("ok", "manual")
    removed = await invoke(worker, action="remove", job_id="standup")
    assert removed == f"Removed routine standup (id {routine.id})."
    assert await scheduler.next_fire_time(routine.id) is None
    assert "home_db" in shares[0].answered and "routines_sync" in shares[0].answered


async def test_before_the_homes_scheduler_runs_a_change_waits_and_a_run_is_refused(
    shares: Shares,
) -> None:
    worker = shares[1]
    created = await invoke(
        worker, action="create", name="later", prompt="Say hi.", schedule="every 2h",
        channel=CHANNEL, chat="chat-1",
    )  # fmt: skip
    assert created.startswith("Created routine later")  # stored; the scheduler's start reads it
    refused = await cronjob_manage.invoke(worker_run(worker), {"action": "run", "job_id": "later"})
    assert refused.is_error and NOT_STARTED in refused.text
    scheduler: RoutineScheduler = await start_scheduler(shares)
    made = await scheduler.store.find("scout", "later")
    assert made is not None and await scheduler.next_fire_time(made.id) is not None


async def test_delegation_search_in_a_worker_reads_atlas_db_through_the_home(
    shares: Shares,
) -> None:
    home_store = shares[0].runtime.audit
    record = DelegationRecord(home_store)
    turn = await record.start_turn(
        "ex-bbb222", "codex", "codex@main", "/tmp/app", "rename the helper", "scout:1"
    )
    await record.add(turn, "final", "Renamed the helper in three files.")
    await record.finish_turn(turn, "Renamed the helper in three files.", "", None, "done")
    before = shares[0].answered.count("home_db")
    result = await delegation_search.invoke(worker_run(shares[1]), {"query": "renamed helper"})
    assert not result.is_error, result.text
    assert "ex-bbb222" in result.text and "Renamed the helper" in result.text
    assert shares[0].answered.count("home_db") > before  # read in the home's process
