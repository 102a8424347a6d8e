"""A node that loses a bot stops that bot's routine runs (issue #36; atlas/cluster/home_node.py,
`BotTasks`): a run handed to the node (`ROUTINE_RUN`) of bot "b" is cancelled when the node
loses "b", its record failed with the lost lease as why, while the run of bot "c", held by the
same node, goes on to its end. A real HomeNode (not started: its lease callbacks are called as
ClusterNode would) with its runs recorded in PostgreSQL; the model turn is a stand-in that
waits until it is let go."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from atlas.agent.loop import TurnOutcome
from atlas.channels.manager import RunningChannels
from atlas.cluster.home_node import ROUTINE_RUN, HomeNode
from atlas.cluster.messages import NodeMessage
from atlas.dispatch import Detached
from atlas.routines.runner import SHUT_DOWN
from atlas.routines.store import Target
from atlas.store.pg.outbox import PgOutboxRows
from atlas.store.pg.routines import PgRoutineStore
from atlas.store.pg.server import PgServer

pytestmark = pytest.mark.postgres


class Turns:
    """The dispatcher's part a node's routine run uses: each bot's turn waits to be let go."""

    def __init__(self, server: PgServer) -> None:
        self.outbox = SimpleNamespace(rows=PgOutboxRows(server), claim_with=lambda epoch: None)
        self.asks = SimpleNamespace(listen=lambda wake: None)
        self.channels: dict[str, Any] = {}
        self.forgotten: list[str] = []
        self.started: dict[str, asyncio.Event] = {}
        self.go: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    async def run_detached(self, bot_name: str, prompt: str, **options: Any) -> Detached:
        self.started.setdefault(bot_name, asyncio.Event()).set()
        try:
            await self.go.setdefault(bot_name, asyncio.Event()).wait()
        except asyncio.CancelledError:
            self.cancelled.append(bot_name)  # where a sandboxed command would be killed
            raise
        return Detached(1, TurnOutcome(f"{bot_name}: done", rounds=1), None)

    async def forget_bot(self, bot: str, why: str) -> None:
        self.forgotten.append(bot)


def a_home() -> Any:
    settings = SimpleNamespace(
        cluster=SimpleNamespace(lease_seconds=10.0, heartbeat_seconds=2.0),
        routines=SimpleNamespace(time_limit=60.0),
        timezone="UTC",
    )
    return SimpleNamespace(bots={"b": None, "c": None}, settings=settings)


def a_node(server: PgServer, store: PgRoutineStore, turns: Turns) -> HomeNode:
    """Node n1 over `turns` (a dispatcher's stand-in), no channels, no scheduler."""
    return HomeNode(
        a_home(),
        server,
        "n1",
        turns,  # type: ignore[arg-type]
        RunningChannels(),
        make_scheduler=lambda: None,  # type: ignore[arg-type,return-value]
        routine_store=store,
    )


def handed(message_id: int, bot: str, routine_id: int, run_id: int) -> NodeMessage:
    body = {"routine": routine_id, "run": run_id, "due": None}
    return NodeMessage(message_id, bot, ROUTINE_RUN, body, "s", datetime.now(UTC))


async def test_a_lost_bot_s_run_is_stopped_and_another_bot_s_goes_on(postgres_url: str) -> None:
    async with PgServer(postgres_url) as server:
        store = PgRoutineStore(server)
        turns = Turns(server)
        node = a_node(server, store, turns)
        runs: dict[str, int] = {}
        for number, bot in enumerate(("b", "c"), start=1):
            target = Target("fake", "chat-1") if bot == "b" else None
            routine = await store.create(bot, "news", "Tell the news.", "every 1h", target)
            runs[bot] = await store.start_run(routine, "manual", None)
            node._taken([handed(number, bot, routine.id, runs[bot])])
        try:
            for bot in ("b", "c"):
                started = turns.started.setdefault(bot, asyncio.Event())
                await asyncio.wait_for(started.wait(), 5)
            await asyncio.wait_for(node._stop_bot("b"), 5)  # the node lost "b"'s lease
            assert turns.cancelled == ["b"] and turns.forgotten == ["b"]
            stopped = await store.get_run(runs["b"])
            assert stopped is not None and stopped.status == "failed"
            assert stopped.error == "stopped: node n1 lost bot b's lease mid-run"
            # Its person is told, by b's next holder: an outbox row and a node message for it.
            rows = await server.pool.fetch("SELECT kind, text FROM outbox")
            assert [(row["kind"], row["text"]) for row in rows] == [
                (
                    "notice",
                    'Routine "news" was stopped: node n1 lost bot b\'s lease mid-run; '
                    "it runs again at its next time.",
                )
            ]
            sent = await server.pool.fetch("SELECT to_bot, kind FROM node_messages")
            assert [(row["to_bot"], row["kind"]) for row in sent] == [("b", "outbox_row")]
            assert stopped.delivery == "notice queued for fake:chat-1"
            going = await store.get_run(runs["c"])
            assert going is not None and going.status == "running"  # "c" is still held here
            turns.go["c"].set()
            for _ in range(100):
                going = await store.get_run(runs["c"])
                if going is not None and going.status != "running":
                    break
                await asyncio.sleep(0.05)
            assert going is not None and (going.status, going.text) == ("ok", "c: done")
        finally:
            await node.stop()


async def test_a_run_stopped_by_the_node_s_stop_says_atlas_shut_down(postgres_url: str) -> None:
    async with PgServer(postgres_url) as server:
        store = PgRoutineStore(server)
        turns = Turns(server)
        node = a_node(server, store, turns)
        routine = await store.create("c", "news", "Tell the news.", "every 1h", None)
        run_id = await store.start_run(routine, "manual", None)
        node._taken([handed(1, "c", routine.id, run_id)])
        await asyncio.wait_for(turns.started.setdefault("c", asyncio.Event()).wait(), 5)
        await node.stop()
        stopped = await store.get_run(run_id)
        assert stopped is not None and (stopped.status, stopped.error) == ("failed", SHUT_DOWN)
