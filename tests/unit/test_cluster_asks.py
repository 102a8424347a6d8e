"""Questions between nodes on a real PostgreSQL server (atlas/cluster/asks.py): each node's
SharedAsks publishes the questions its turns wait on, lists the other node's, and sends an
answer given on its page to the node whose turn waits. (The whole path, two `atlas run --node`
processes and their dashboards: tests/integration/test_nodes.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from atlas.channels.base import Address, Answer, Question, QuestionOutcome
from atlas.cluster.asks import ASK_ANSWER, SharedAsks
from atlas.cluster.nodes import NodeRegistry
from atlas.errors import AtlasError
from atlas.pending_asks import PendingAsk, PendingAsks
from atlas.store.pg.server import PgServer

WHERE = Address("helper", "telegram:helper", "1")
LEASE = 5.0


class FakeNode:
    """The parts of HomeNode SharedAsks uses; a node message reaches the bot's holder at once,
    through JSON as a `node_messages` row carries it."""

    def __init__(self, server: PgServer, name: str, holders: dict[str, SharedAsks]) -> None:
        self.server, self.name, self.holders = server, name, holders
        self.cluster = SimpleNamespace(timing=SimpleNamespace(lease=LEASE))
        self.messages = self
        self.tasks: set[asyncio.Task[Any]] = set()

    async def send(self, bot: str, kind: str, body: dict[str, Any]) -> int:
        assert kind == ASK_ANSWER
        self.holders[bot].answer_here(json.loads(json.dumps(body)))
        return 1

    def keep(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


@dataclass
class Pair:
    server: PgServer
    here: PendingAsks  # node a's, which holds the bot "helper" and runs its turns
    there: PendingAsks  # node b's


@pytest.fixture
async def pair(postgres_url: str) -> AsyncIterator[Pair]:
    async with PgServer(postgres_url) as server:
        holders: dict[str, SharedAsks] = {}
        shared = []
        for name in ("a", "b"):
            await NodeRegistry(server).register(name)
            node = FakeNode(server, name, holders)
            shared.append(SharedAsks(node, PendingAsks(), poll=0.05))  # type: ignore[arg-type]
        holders["helper"] = shared[0]
        for one in shared:
            one.start()
        try:
            yield Pair(server, shared[0].asks, shared[1].asks)
        finally:
            for one in shared:
                await one.stop()


async def until(asks: PendingAsks, check: Callable[[], bool]) -> None:
    """Wait (5 s at most) for `check` to hold, looked at on each change of `asks`."""
    changed = asyncio.Event()
    asks.listen(changed.set)
    async with asyncio.timeout(5):
        while not check():
            await changed.wait()
            changed.clear()


async def listed(asks: PendingAsks) -> PendingAsk:
    await until(asks, lambda: bool(asks.open()))
    return asks.open()[0]


async def test_a_question_set_is_answered_on_the_other_node_once(pair: Pair) -> None:
    never: asyncio.Future[QuestionOutcome] = asyncio.get_running_loop().create_future()
    questions = [
        Question("Which database?", ("Postgres", "SQLite")),
        Question("Which days?", ("Mon", "Tue"), multi_select=True),
    ]
    turn = asyncio.create_task(pair.here.question_set(WHERE, 4, questions, lambda: never))
    there = await listed(pair.there)
    assert there.kind == "questions" and there.questions == tuple(questions)
    assert there.address == WHERE and there.conversation_id == 4
    with pytest.raises(AtlasError, match="answer every question"):  # checked as on a's page
        pair.there.answer_questions(there.id, [Answer(("SQLite",))])
    answers = [Answer(("SQLite",), by="the dashboard"), Answer(("Mon", "Tue"), "and Fri")]
    assert pair.there.answer_questions(there.id, answers)
    outcome = await asyncio.wait_for(turn, 5)
    assert outcome == QuestionOutcome("submitted", tuple(answers))
    assert not pair.there.answer_questions(there.id, answers)  # closed: a second is refused
    assert not pair.here.answer_questions(there.id, answers)


async def test_a_subagents_question_is_answered_in_words_on_the_other_node(pair: Pair) -> None:
    parent_answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    turn = asyncio.create_task(
        pair.here.parent_question(WHERE, 4, "subagent sa-1a2b3c", "Which branch?", parent_answer)
    )
    there = await listed(pair.there)
    assert (there.kind, there.asker, there.question) == (
        "subagent",
        "subagent sa-1a2b3c",
        "Which branch?",
    )
    with pytest.raises(AtlasError, match="the answer is empty"):
        pair.there.answer_text(there.id, "  ")
    assert pair.there.answer_text(there.id, "main")
    assert await asyncio.wait_for(turn, 5) == ("main", True)  # the person's, not the agent's
    assert parent_answer.cancelled()


async def test_a_stopped_nodes_question_set_is_closed_on_the_other_page(pair: Pair) -> None:
    never: asyncio.Future[QuestionOutcome] = asyncio.get_running_loop().create_future()
    questions = [Question("Which database?", ("Postgres", "SQLite"))]
    turn = asyncio.create_task(pair.here.question_set(WHERE, 4, questions, lambda: never))
    there = await listed(pair.there)
    await pair.server.pool.execute(  # node a stops heartbeating
        "UPDATE nodes SET heartbeat_at = now() - interval '1 hour' WHERE name = 'a'"
    )
    await until(pair.there, lambda: pair.there.get(there.id) is None)
    assert pair.there.settled[0].outcome == "closed (node stopped)"
    assert not pair.there.answer_questions(there.id, [Answer(("SQLite",))])
    assert not turn.done()  # a's turn (were a alive) still waits on its own chat
    turn.cancel()
    await asyncio.gather(turn, return_exceptions=True)
