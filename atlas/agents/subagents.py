"""Subagents: child runs with a clean context, started by `delegate`, one batch at a time.

Each subagent is `Dispatcher.run_detached(bot, prompt, run_kind="subagent")` in a conversation
of its own (`subagent:<id>`), driven by a task this manager keeps. At most
`[agents] subagents_at_once` run at once per parent conversation; the rest wait. When every
subagent of a batch has ended, the batch's summaries go back together (one notice, or the
return value of a waiting call). Every subagent is a row of `delegations` in atlas.db.

Steering: the message is kept, the subagent's current run is cancelled (its model call or tool
call is cut short; the next run's history repair marks it interrupted), and the same
conversation goes on with the message as a new user message. So a steer takes effect at once,
not at the end of a round: the loop has no hook between rounds.

Questions: a subagent's ask_parent puts its question into the parent conversation as a notice
(a turn there), and waits on a future that the parent's `delegate action=answer` resolves, up
to `[agents] ask_parent_seconds`. The question is also listed on the dashboard's Waiting page
(Dispatcher.asks, atlas/pending_asks.py): the first answer wins, the parent's or the person's;
the person's is told to the parent as a notice. While it waits, its run lends its turn slot back
(Dispatcher.slot_lent), so the parent's turn can run even when every slot is taken. A parent
that waits for its subagents (a routine's delegate) cannot answer: the question ends at once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from atlas.agent.spill import spill
from atlas.channels.base import Address
from atlas.errors import ToolError
from atlas.providers.base import Usage
from atlas.store.db import utc_now_iso
from atlas.tools.registry import Notifier, RunContext
from atlas.tools.services import ParentAnswer

if TYPE_CHECKING:
    from atlas.dispatch import Detached, Dispatcher
    from atlas.store.home_db import HomeStore

log = logging.getLogger(__name__)

ENDED = ("done", "failed", "stopped")

SUBAGENT_PROMPT = """\
You are a subagent: another agent handed you one task. You know only what is written below;
nobody reads your messages until you finish. Work on your own with your tools; only when you
cannot go on without a decision or a fact that only it has, ask it with ask_parent. Then answer
with a complete, self-contained report of what you found or did, with the facts, names,
numbers and paths the other agent needs. That answer is all it sees.

# Goal
{goal}

# Context
{context}"""

STEER_PREFIX = "[A message from the agent that started you; take it into account now]\n"

QUESTION_NOTICE = """\
Subagent {sub} asks you (question {question}); it waits up to {seconds:g} s for your answer.
Its task: {goal}
Its question: {text}
Answer with delegate action=answer, subagent_id={sub} and your answer as message. If only the
user knows, ask them with ask_user first. Without an answer in time it goes on without one."""


PERSON_ANSWERED = """\
The person answered subagent {sub}'s question {question} on the dashboard; it goes on with that
answer, so do not answer it yourself. Their answer: {answer}"""


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@dataclass
class Subagent:
    id: str
    batch: str
    bot: str
    parent_conversation_id: int
    goal: str
    context: str
    status: str = "queued"
    result: str = ""  # the answer, whole
    summary: str = ""  # the answer within the summary budget (or why there is none)
    reason: str = ""  # why it failed or was stopped
    usage: Usage = field(default_factory=Usage)
    rounds: int = 0
    conversation_id: int | None = None
    steering: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    task: asyncio.Task[None] | None = None
    current: asyncio.Task[Detached] | None = None  # the run in flight
    # Where its questions go: the parent's notices; None while the parent waits for it.
    ask_parent_via: Notifier | None = None
    question: ParentQuestion | None = None  # the question waiting for the parent's answer
    last_question: str = ""  # how the previous question ended, for an answer that comes late


@dataclass
class ParentQuestion:
    id: str
    text: str
    answer: asyncio.Future[str]


@dataclass
class Batch:
    id: str
    subagents: list[Subagent]

    def report(self) -> str:
        """Every subagent's outcome, for the notice or the waiting call's result."""
        counts: dict[str, int] = {}
        for sub in self.subagents:
            counts[sub.status] = counts.get(sub.status, 0) + 1
        tally = ", ".join(f"{n} {status}" for status, n in counts.items())
        parts = [f"The subagents of {self.id} have ended: {tally}."]
        for sub in self.subagents:
            parts.append(f"## {sub.id} ({sub.status}): {_first_line(sub.goal)}\n{sub.summary}")
        return "\n\n".join(parts)


def _first_line(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


class SubagentManager:
    """A home's subagents: spawn, list, steer, stop; one per running Dispatcher, kept by its
    services (atlas/agents/services.py)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.home = dispatcher.runtime.home
        self.records: HomeStore = dispatcher.runtime.audit
        self._subagents: dict[str, Subagent] = {}
        self._slots: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- spawning ----------------------------------------------------------------------------

    async def spawn(self, run: RunContext, tasks: list[tuple[str, str]]) -> Batch:
        """Start one subagent per (goal, context); they run in the background."""
        batch = Batch(new_id("batch"), [])
        for goal, context in tasks:
            sub = Subagent(new_id("sa"), batch.id, run.bot.name, run.conversation_id, goal, context)
            await self.records.record_delegation(
                {
                    "id": sub.id,
                    "batch": batch.id,
                    "bot": sub.bot,
                    "parent_conversation_id": sub.parent_conversation_id,
                    "parent_run_kind": run.run_kind,
                    "goal": goal,
                    "context": context,
                    "status": "queued",
                }
            )
            batch.subagents.append(sub)
            self._subagents[sub.id] = sub
        slots = self._slots.setdefault(
            (run.bot.name, run.conversation_id),
            asyncio.Semaphore(self.home.settings.agents.subagents_at_once),
        )
        for sub in batch.subagents:
            sub.task = self._keep(self._drive(sub, slots), f"subagent {sub.id}")
        return batch

    async def wait(self, batch: Batch) -> None:
        """Until every subagent of the batch has ended. Cancelled: they are stopped too."""
        tasks = [s.task for s in batch.subagents if s.task]
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for sub in batch.subagents:
                self._cancel(sub, "the run that started it was cancelled")
            raise
        for sub in batch.subagents:  # ended: from now on only their rows in atlas.db remain
            self._subagents.pop(sub.id, None)

    def notify_when_done(self, batch: Batch, notify: Notifier) -> None:
        """One notice with every summary, when the batch's last subagent ends."""

        for sub in batch.subagents:  # a parent that is notified can take questions too
            sub.ask_parent_via = notify

        async def report() -> None:
            await self.wait(batch)
            await notify(batch.report())

        self._keep(report(), f"notice for {batch.id}")

    def _keep(self, coro, name: str) -> asyncio.Task[None]:  # type: ignore[no-untyped-def]
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- one subagent ------------------------------------------------------------------------

    async def _drive(self, sub: Subagent, slots: asyncio.Semaphore) -> None:
        settings = self.home.settings.agents
        try:
            async with slots:
                sub.status = "running"
                await self.records.update_delegation(
                    sub.id, status="running", started_at=utc_now_iso()
                )
                async with asyncio.timeout(settings.subagent_seconds):
                    await self._runs(sub)
        except TimeoutError:
            sub.status = "failed"
            sub.reason = f"stopped after its time limit of {settings.subagent_seconds:.0f} s"
        except asyncio.CancelledError:
            sub.status = "stopped"
            sub.reason = sub.stop_reason or "Atlas stopped"
            await asyncio.shield(self._record_end(sub))
            raise
        except Exception as exc:  # a bug in one subagent must not take the batch with it
            log.exception("subagent %s crashed", sub.id)
            sub.status, sub.reason = "failed", f"{type(exc).__name__}: {exc}"
        await self._record_end(sub)

    async def _runs(self, sub: Subagent) -> None:
        """Run, and run again in the same conversation for each steering message."""
        prompt = SUBAGENT_PROMPT.format(goal=sub.goal, context=sub.context or "(none)")
        if sub.steering:  # steered while it waited for a slot
            prompt += "\n\n" + STEER_PREFIX + "\n".join(sub.steering)
            sub.steering.clear()
        while True:
            sub.status = "running"
            sub.current = asyncio.create_task(
                self.dispatcher.run_detached(
                    sub.bot,
                    prompt,
                    run_kind="subagent",
                    chat=f"subagent:{sub.id}",
                    time_limit=self.home.settings.agents.subagent_seconds,
                )
            )
            try:
                detached = await sub.current
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if (current and current.cancelling()) or not sub.steering:
                    raise  # stop, time limit or shutdown: not a steer
                detached = None
            finally:
                sub.current = None
            if detached is not None:
                self._take(sub, detached)
            if sub.steering:
                prompt = STEER_PREFIX + "\n".join(sub.steering)
                sub.steering.clear()
                continue
            return

    def _take(self, sub: Subagent, detached: Detached) -> None:
        sub.conversation_id = detached.conversation_id
        outcome = detached.outcome
        if outcome is None:
            sub.status, sub.reason = "failed", detached.error or "no outcome"
            return
        sub.usage.input_tokens += outcome.usage.input_tokens
        sub.usage.output_tokens += outcome.usage.output_tokens
        sub.rounds += outcome.rounds
        sub.result = outcome.text
        if outcome.halted:
            sub.status, sub.reason = "failed", outcome.text
        else:
            sub.status, sub.reason = "done", ""

    async def _record_end(self, sub: Subagent) -> None:
        spill_path = ""
        if sub.status == "done":
            budget = self.home.settings.agents.summary_chars
            path = self.home.spill_dir / sub.bot / str(sub.parent_conversation_id) / f"{sub.id}.md"
            sub.summary = await asyncio.to_thread(spill, sub.result, budget, path)
            spill_path = str(path) if len(sub.result) > budget else ""
        else:
            sub.summary = f"{sub.status.capitalize()}: {sub.reason}"
            if sub.result:
                sub.summary += f"\nIts last answer: {sub.result[:1000]}"
        try:
            await self.records.update_delegation(
                sub.id,
                status=sub.status,
                result=sub.result,
                reason=sub.reason,
                spill_path=spill_path,
                conversation_id=sub.conversation_id,
                input_tokens=sub.usage.input_tokens,
                output_tokens=sub.usage.output_tokens,
                rounds=sub.rounds,
                ended_at=utc_now_iso(),
            )
        except Exception:  # the record is lost, not the result: the notice still goes out
            log.exception("could not record the end of subagent %s", sub.id)

    # ---- list, steer, stop -------------------------------------------------------------------

    async def delegation(self, subagent_id: str) -> dict[str, Any] | None:
        """A subagent's row in atlas.db, also once it has ended."""
        return await self.records.delegation(subagent_id)

    def find(self, run: RunContext, subagent_id: str) -> Subagent | None:
        sub = self._subagents.get(subagent_id.strip())
        if sub and sub.bot == run.bot.name and sub.parent_conversation_id == run.conversation_id:
            return sub
        return None

    async def listing(self, run: RunContext) -> list[dict[str, object]]:
        rows = await self.records.delegations(run.bot.name, run.conversation_id)
        for row in rows:  # the live status is fresher than the row while it runs
            live = self._subagents.get(str(row["id"]))
            if live and live.status not in ENDED:
                row["status"] = live.status
        return rows

    def running(self) -> list[Subagent]:
        """Every subagent this daemon runs now, whoever started it (the dashboard's Workbench)."""
        return list(self._subagents.values())

    def get(self, subagent_id: str) -> Subagent | None:
        """A running subagent by id, whoever started it (the person steers or stops it)."""
        return self._subagents.get(subagent_id.strip())

    def steer(self, sub: Subagent, message: str) -> None:
        sub.steering.append(message)
        if sub.current is not None and not sub.current.done():
            sub.current.cancel()

    def stop(self, sub: Subagent, reason: str) -> None:
        self._cancel(sub, reason)

    # ---- questions to the parent -------------------------------------------------------------

    async def ask_parent(self, run: RunContext, question: str) -> ParentAnswer:
        sub = await self._asking(run)
        if sub is None:
            return ParentAnswer(None, "this run is not a subagent that Atlas is running now")
        if sub.ask_parent_via is None:
            return ParentAnswer(
                None,
                "the agent that started you waits for your result and cannot answer meanwhile",
            )
        if sub.question is not None:
            return ParentAnswer(None, f"your question {sub.question.id} is still waiting")
        seconds = self.home.settings.agents.ask_parent_seconds
        asked = ParentQuestion(new_id("q"), question, asyncio.get_running_loop().create_future())
        notice = QUESTION_NOTICE.format(
            sub=sub.id,
            question=asked.id,
            seconds=seconds,
            goal=_first_line(sub.goal),
            text=question,
        )
        sub.question, sub.status = asked, "asking"
        how = "cut short (a steer or a stop)"
        try:
            try:
                await sub.ask_parent_via(notice)
            except Exception as exc:  # its conversation is gone, or cannot be written to
                log.warning(
                    "subagent %s: its question could not be delivered", sub.id, exc_info=True
                )
                how = f"your question could not reach the agent that started you ({exc})"
                return ParentAnswer(None, how, asked.id)
            where = await self._parent_address(sub)
            try:
                async with self.dispatcher.slot_lent(), asyncio.timeout(seconds):
                    # Listed on the dashboard's Waiting page too: the person may answer first.
                    answer, by_person = await self.dispatcher.asks.parent_question(
                        where,
                        sub.parent_conversation_id,
                        f"subagent {sub.id}",
                        question,
                        asked.answer,
                    )
            except TimeoutError:
                how = f"nobody answered within {seconds:g} s"
                return ParentAnswer(None, how, asked.id)
            if not by_person:
                how = "answered"
                return ParentAnswer(answer, "", asked.id)
            how = f"the person answered it on the dashboard: {answer}"
            await self._tell_parent(
                sub, PERSON_ANSWERED.format(sub=sub.id, question=asked.id, answer=answer)
            )
            return ParentAnswer(answer, "", asked.id, by="the person")
        finally:
            sub.question, sub.last_question = None, f"{asked.id} ended: {how}"
            if sub.status == "asking":
                sub.status = "running"

    async def _parent_address(self, sub: Subagent) -> Address:
        """Where the parent conversation is, for the Waiting page (its bot, channel, chat)."""
        store = await self.dispatcher.runtime.store(self.dispatcher.runtime.home.bot(sub.bot))
        c = await store.get_conversation(sub.parent_conversation_id)
        if c is None:  # gone meanwhile: the page still names the bot and the subagent
            return Address(sub.bot, "subagent", f"subagent:{sub.id}")
        return Address(c.bot, c.channel, c.chat, c.thread, c.user)

    async def _tell_parent(self, sub: Subagent, text: str) -> None:
        """A notice to the parent conversation; one that cannot be delivered is only logged
        (the subagent has its answer already)."""
        if sub.ask_parent_via is None:
            return
        try:
            await sub.ask_parent_via(text)
        except Exception:
            log.warning("subagent %s: could not tell its parent", sub.id, exc_info=True)

    def answer(self, sub: Subagent, message: str) -> str:
        asked = sub.question
        if asked is None or asked.answer.done():
            late = f" (its question {sub.last_question})" if sub.last_question else ""
            raise ToolError(
                f"subagent {sub.id} has no open question{late}; to tell it something now, "
                "use action=steer"
            )
        asked.answer.set_result(message)
        return asked.id

    async def _asking(self, run: RunContext) -> Subagent | None:
        """The subagent whose run this is: its conversation is `subagent:<id>`."""
        if run.run_kind != "subagent":
            return None
        store = await self.dispatcher.runtime.store(run.bot)
        conversation = await store.get_conversation(run.conversation_id)
        if conversation is None or not conversation.chat.startswith("subagent:"):
            return None
        sub = self._subagents.get(conversation.chat.removeprefix("subagent:"))
        return sub if sub is not None and sub.bot == run.bot.name else None

    def _cancel(self, sub: Subagent, reason: str) -> None:
        if sub.task and not sub.task.done():
            sub.stop_reason = reason
            sub.task.cancel()

    async def close(self) -> None:
        """Stop every subagent and drop pending notices (the daemon is stopping)."""
        for sub in self._subagents.values():
            self._cancel(sub, "Atlas stopped")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
