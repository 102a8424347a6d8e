"""A routine's run on its bot's holder (atlas/cluster/home_node.py, `NodeRuns.hand_run` and
`ROUTINE_RUN`): the scheduler's node hands the run of a bot it does not hold to the holder as
a node message, taken once (after the claim commits), or waiting while nobody holds the bot;
the scheduler itself runs nothing of a handed run and follows its record until it ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from atlas.cluster.home_node import ROUTINE_RUN, NodeRuns
from atlas.cluster.messages import Inbox, NodeMessage, NodeMessages
from atlas.cluster.node import ClusterNode, ClusterTiming
from atlas.providers.scripted import ScriptedModel
from atlas.routines import scheduler as scheduler_module
from atlas.routines.store import RunResult
from atlas.store.pg.server import PgServer
from tests.helpers import close_test_stores
from tests.unit.test_routines import home_with, rig_for

FAST = ClusterTiming(lease=1.5, heartbeat=0.2)
ROUTINE = SimpleNamespace(id=11, bot="helper", name="news")


@pytest.fixture
async def server(postgres_url: str) -> AsyncIterator[PgServer]:
    async with PgServer(postgres_url) as opened:
        yield opened


def scheduler_node(
    server: PgServer, *, holds: bool, ran: list[tuple[Any, ...]] | None = None
) -> NodeRuns:
    """The NodeRuns of the scheduler's node "s" (only what `hand_run` asks of a HomeNode);
    `ran` records the runs it starts itself (`HomeNode.run_here`)."""
    node = SimpleNamespace(
        name="s",
        messages=NodeMessages(server, "s"),
        holds=lambda bot: holds,
        run_here=lambda *run: (ran if ran is not None else []).append(run),
    )
    return NodeRuns(node)  # type: ignore[arg-type]


def holder_inbox(server: PgServer, owner: ClusterNode, got: list[NodeMessage]) -> Inbox:
    def deliver(conn: asyncpg.Connection, messages: list[NodeMessage]) -> None:
        pass  # ROUTINE_RUN does nothing inside the claim (HomeNode._handle)

    def taken(messages: list[NodeMessage]) -> None:
        got.extend(message for message in messages if message.kind == ROUTINE_RUN)

    return Inbox(
        NodeMessages(server, owner.name),
        owner.fence,
        lambda: owner.held,
        deliver,
        sweep_seconds=0.3,
        taken=taken,
    )


@pytest.mark.postgres
async def test_a_run_of_a_bot_held_elsewhere_is_taken_once_by_its_holder(
    server: PgServer,
) -> None:
    owner = ClusterNode(server, "h", ["helper"], FAST, run_scheduler=False)
    await owner.start()
    got: list[NodeMessage] = []
    inboxes = [holder_inbox(server, owner, got) for _ in range(2)]  # racing for each notice
    for inbox in inboxes:
        await inbox.start()
    try:
        due = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
        # Held by the scheduler's own node: run there, on the node's own path (kept under the
        # bot, so losing it stops the run), with no node message.
        ran: list[tuple[Any, ...]] = []
        assert await scheduler_node(server, holds=True, ran=ran).hand_run(ROUTINE, 4, due)  # type: ignore[arg-type]
        assert ran == [("helper", 11, 4, due.isoformat())]
        assert await scheduler_node(server, holds=False).hand_run(ROUTINE, 5, due)  # type: ignore[arg-type]
        for _ in range(60):
            if got:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # a second taking would show up now
        assert [(m.to_bot, m.body, m.from_node) for m in got] == [
            ("helper", {"run": 5, "routine": 11, "due": due.isoformat()}, "s")
        ]
        rows = await server.pool.fetch("SELECT kind, taken_by FROM node_messages")
        assert [(row["kind"], row["taken_by"]) for row in rows] == [(ROUTINE_RUN, "h")]
    finally:
        for inbox in inboxes:
            await inbox.stop()
        await owner.stop()


@pytest.mark.postgres
async def test_a_run_of_a_bot_held_by_nobody_waits_for_the_next_holder(
    server: PgServer,
) -> None:
    assert await scheduler_node(server, holds=False).hand_run(ROUTINE, 6, None)  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    waiting = await server.pool.fetch("SELECT taken_by FROM node_messages")
    assert [row["taken_by"] for row in waiting] == [None]  # nobody held it: it waits
    owner = ClusterNode(server, "c", ["helper"], FAST, run_scheduler=False)
    got: list[NodeMessage] = []
    inbox = holder_inbox(server, owner, got)
    await inbox.start()  # before the node holds the bot: found by its sweep
    await owner.start()
    try:
        for _ in range(60):
            if got:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.6)  # two sweeps more: still taken once
        assert [m.body for m in got] == [{"run": 6, "routine": 11, "due": None}]
        rows = await server.pool.fetch("SELECT taken_by FROM node_messages")
        assert [row["taken_by"] for row in rows] == ["c"]
    finally:
        await inbox.stop()
        await owner.stop()


async def test_the_scheduler_runs_nothing_of_a_handed_run_and_follows_its_record(
    home_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "HANDED_POLL", 0.05)
    rig = rig_for(home_with(home_path), ScriptedModel())
    handed: list[tuple[int, int]] = []

    async def hand_run(routine: Any, run_id: int, due: datetime | None) -> bool:
        handed.append((routine.id, run_id))
        return True

    rig.dispatcher.hand_run = hand_run  # type: ignore[attr-defined]
    try:
        await rig.scheduler.start()
        routine = await rig.routine("news")
        run_id = await rig.scheduler.run_now(routine)
        await asyncio.sleep(0.3)
        assert handed == [(routine.id, run_id)]
        assert rig.scheduler.is_running(routine.id)  # its holder runs it: not started again
        run = await rig.scheduler.store.get_run(run_id)
        assert run is not None and run.status == "running"
        await rig.scheduler.store.finish_run(run_id, RunResult("ok", text="done there"))
        await asyncio.wait_for(rig.scheduler.wait_runs(), 2)
        assert not rig.scheduler.is_running(routine.id)
        assert rig.model.requests == [] and rig.channel.sent == []  # nothing ran here
    finally:
        await rig.scheduler.stop()
        await rig.dispatcher.shutdown()
        await rig.runtime.close()
        await close_test_stores()
