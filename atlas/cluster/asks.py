"""Questions a turn waits on, answered on any node's dashboard.

A turn's questions (approvals, ask_user's question sets, a subagent's question) wait in memory
on the node running the turn (atlas/pending_asks.py). Each node publishes its own open ones as
rows of `node_asks` (and their outcome once settled); every other node lists the open rows of
live nodes on its Waiting page (`list_elsewhere`), which checks an answer as for its own
questions, and an answer given there travels as a node message (`ask_answer`) to the bot's
holder, the node whose turn waits: first answer wins there, as between a chat and the
dashboard. A row of a node that stopped heartbeating is closed on the others' pages.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import asyncpg

from atlas.channels.base import Answer, Question, QuestionOutcome
from atlas.errors import AtlasError

if TYPE_CHECKING:
    from atlas.cluster.home_node import HomeNode
    from atlas.pending_asks import PendingAsks

log = logging.getLogger(__name__)

ASK_ANSWER = "ask_answer"  # a node message: the answer to a question asked on the holder
POLL_SECONDS = 1.0

_TROUBLE = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class SharedAsks:
    """This node's side: publish its questions, mirror the others'."""

    def __init__(self, node: HomeNode, asks: PendingAsks, *, poll: float = POLL_SECONDS):
        self.node = node
        self.asks = asks
        self.poll = poll
        self._published: set[str] = set()  # own questions with a row
        self._mirrored: set[str] = set()  # other nodes' questions listed here
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.asks.listen(self._changed.set)
        self._task = asyncio.create_task(self._run(), name=f"asks {self.node.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.poll):
                    await self._changed.wait()
            except TimeoutError:
                pass
            self._changed.clear()
            try:
                await self._publish()
                await self._mirror()
            except _TROUBLE as exc:
                log.warning("node %s: questions between nodes: %s", self.node.name, exc)
            except Exception:  # a bug here must not end the loop
                log.exception("node %s: questions between nodes", self.node.name)

    async def _publish(self) -> None:
        pool = self.node.server.pool
        own = {ask.id: ask for ask in self.asks.open() if ask.id not in self._mirrored}
        for ask_id in own.keys() - self._published:
            ask = own[ask_id]
            address = ask.address
            await pool.execute(
                "INSERT INTO node_asks (id, node, bot, address, conversation_id, question, "
                "choices, kind, questions, asker) "
                "VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::jsonb, $8, $9::jsonb, $10) "
                "ON CONFLICT (id) DO NOTHING",
                ask.id,
                self.node.name,
                address.bot,
                json.dumps(
                    [address.bot, address.channel, address.chat, address.thread, address.user]
                ),
                ask.conversation_id,
                ask.question,
                json.dumps(list(ask.choices)),
                ask.kind,
                json.dumps([asdict(question) for question in ask.questions]),
                ask.asker,
            )
            self._published.add(ask_id)
        for ask_id in self._published - own.keys():
            settled = next((a for a in self.asks.settled if a.id == ask_id), None)
            outcome = settled.outcome if settled is not None else "closed"
            await pool.execute(
                "UPDATE node_asks SET outcome = $2 WHERE id = $1 AND outcome IS NULL",
                ask_id,
                outcome or "closed",
            )
            self._published.discard(ask_id)

    async def _mirror(self) -> None:
        from atlas.channels.base import Address
        from atlas.cluster.nodes import NodeRegistry
        from atlas.pending_asks import PendingAsk

        live = await NodeRegistry(self.node.server).live_nodes(self.node.cluster.timing.lease)
        rows = await self.node.server.pool.fetch(
            "SELECT id, node, bot, address, conversation_id, question, choices, outcome, kind, "
            "questions, asker FROM node_asks "
            "WHERE node <> $1 AND (outcome IS NULL OR id = ANY($2::text[]))",
            self.node.name,
            list(self._mirrored),
        )
        seen: set[str] = set()
        for row in rows:
            ask_id = row["id"]
            seen.add(ask_id)
            closed = row["outcome"] is not None or row["node"] not in live
            if ask_id in self._mirrored:
                if closed:
                    self.asks.close_elsewhere(ask_id, row["outcome"] or "closed (node stopped)")
                    self._mirrored.discard(ask_id)
                continue
            if closed:
                continue
            pending = PendingAsk(
                ask_id,
                Address(*json.loads(row["address"])),
                int(row["conversation_id"]),
                row["kind"],
                row["question"],
                tuple(json.loads(row["choices"])),
                questions=tuple(_question(q) for q in json.loads(row["questions"])),
                asker=row["asker"],
            )
            self.asks.list_elsewhere(pending, self._forwarder(row["bot"], ask_id))
            self._mirrored.add(ask_id)
        for ask_id in self._mirrored - seen:  # the row is gone
            self.asks.close_elsewhere(ask_id, "closed")
            self._mirrored.discard(ask_id)

    def _forwarder(self, bot: str, ask_id: str) -> Any:
        def forward(answer: object) -> None:
            body: dict[str, Any] = {"id": ask_id}
            if isinstance(answer, QuestionOutcome):  # a question set's: one per question
                body["answers"] = [asdict(a) for a in answer.answers]
            else:
                body["answer"] = str(answer)
            task = asyncio.create_task(self.node.messages.send(bot, ASK_ANSWER, body))
            self.node.keep(task)

        return forward

    def answer_here(self, body: dict[str, Any]) -> None:
        """Another node's dashboard answered a question of a turn running here (checked there
        as here: this node's check refusing it is not expected)."""
        ask_id = str(body["id"])
        pending = self.asks.get(ask_id)
        try:
            if pending is None:
                answered = False
            elif pending.kind == "questions":
                answers = [_answer(a) for a in body.get("answers", ())]
                answered = self.asks.answer_questions(ask_id, answers)
            elif pending.kind == "subagent":
                answered = self.asks.answer_text(ask_id, str(body.get("answer", "")))
            else:
                answered = self.asks.answer_approval(ask_id, str(body.get("answer", "")))
            if not answered:
                log.info("node %s: question %s answered elsewhere first", self.node.name, ask_id)
        except AtlasError as exc:
            log.warning("node %s: question %s: %s", self.node.name, ask_id, exc)


def _question(sent: dict[str, Any]) -> Question:
    return Question(str(sent["text"]), tuple(sent["choices"]), bool(sent["multi_select"]))


def _answer(sent: dict[str, Any]) -> Answer:
    return Answer(tuple(sent["chosen"]), str(sent["other"]), str(sent["by"]))


__all__ = ["ASK_ANSWER", "SharedAsks"]
