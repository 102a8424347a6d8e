"""Every question a turn is waiting on, home-wide: approvals (the gate's `run.ask`) and ask_user's
question sets (`run.ask_questions`), from every bot and channel, and a subagent's `ask_parent`
question to the agent that started it (`parent_question`: the parent agent's answer through
`delegate action=answer`, or the person's on the page, whichever comes first).

The dispatcher puts each one to its channel (Telegram buttons, Slack blocks, the terminal) as
before, and also lists it here, where the dashboard's Waiting page can answer it. The first
answer wins wherever it is given: when the dashboard's comes first, the channel's wait is
cancelled with an `AnsweredElsewhere` (atlas/channels/base.py), and the channel edits its
question message to show that answer; when the channel's comes first, the entry closes and the
page shows who answered. Whoever listens (`listen`) hears of every change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeVar

from atlas.channels.base import (
    Address,
    Answer,
    AnsweredElsewhere,
    Question,
    QuestionOutcome,
)
from atlas.channels.questions import describe_answer
from atlas.errors import AtlasError

log = logging.getLogger(__name__)

T = TypeVar("T")
SETTLED_KEPT = 20  # how many answered questions the Waiting page still shows
DASHBOARD = "on the dashboard"


@dataclass
class PendingAsk:
    """One question a turn waits on. `answer` resolves with the dashboard's answer."""

    id: str
    address: Address
    conversation_id: int
    kind: Literal["approval", "questions", "subagent"]
    question: str = ""  # an approval's question, or a subagent's
    choices: tuple[str, ...] = ()  # an approval's choices
    questions: tuple[Question, ...] = ()  # ask_user's
    asked_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    answer: asyncio.Future[object] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    outcome: str = ""  # once settled: what answered it, and where
    settled_at: datetime | None = None  # once settled: when (the dashboard's "Answered lately")
    asker: str = ""  # a subagent's question: which subagent asks (`subagent sa-1a2b3c`)
    share: int = 0  # the worker process whose turn waits on it (0: the home's process)

    @property
    def title(self) -> str:
        return self.questions[0].text if self.kind == "questions" else self.question


class PendingAsks:
    """The registry the dispatcher puts every turn's questions through (`approval`,
    `question_set`) and the dashboard answers from (`answer_approval`, `answer_questions`)."""

    def __init__(self) -> None:
        self._open: dict[str, PendingAsk] = {}
        self.settled: deque[PendingAsk] = deque(maxlen=SETTLED_KEPT)  # newest first
        self._listeners: list[Callable[[], None]] = []

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def open(self) -> list[PendingAsk]:
        """What waits now, oldest first."""
        return sorted(self._open.values(), key=lambda p: p.asked_at)

    def get(self, ask_id: str) -> PendingAsk | None:
        return self._open.get(ask_id)

    async def approval(
        self,
        address: Address,
        conversation_id: int,
        question: str,
        choices: list[str],
        channel_ask: Callable[[], Awaitable[str | None]],
    ) -> str | None:
        """The channel's answer or the dashboard's, whichever comes first."""
        pending = PendingAsk(
            secrets.token_hex(8), address, conversation_id, "approval", question, tuple(choices)
        )

        def elsewhere(answer: object) -> AnsweredElsewhere:
            return AnsweredElsewhere((str(answer),), DASHBOARD)

        def said(answer: str | None) -> str:
            return (
                f"{answer} (on {address.channel})"
                if answer
                else f"no answer from {address.channel}"
            )

        answer = await self._race(pending, channel_ask(), elsewhere, said)
        return answer if isinstance(answer, str) or answer is None else str(answer)

    async def question_set(
        self,
        address: Address,
        conversation_id: int,
        questions: list[Question],
        channel_ask: Callable[[], Awaitable[QuestionOutcome]],
    ) -> QuestionOutcome:
        pending = PendingAsk(
            secrets.token_hex(8),
            address,
            conversation_id,
            "questions",
            questions=tuple(questions),
        )

        def elsewhere(outcome: object) -> AnsweredElsewhere:
            assert isinstance(outcome, QuestionOutcome)
            return AnsweredElsewhere(tuple(describe_answer(a) for a in outcome.answers), DASHBOARD)

        def said(outcome: QuestionOutcome) -> str:
            if outcome.status != "submitted":
                return f"{outcome.status} on {address.channel}"
            shown = "; ".join(describe_answer(a) for a in outcome.answers)
            return f"{shown} (on {address.channel})"

        outcome = await self._race(pending, channel_ask(), elsewhere, said)
        assert isinstance(outcome, QuestionOutcome)
        return outcome

    async def parent_question(
        self,
        address: Address,
        conversation_id: int,
        asker: str,
        question: str,
        parent_answer: asyncio.Future[str],
    ) -> tuple[str, bool]:
        """A subagent's question to the agent that started it (`address`, `conversation_id`:
        that agent's conversation). `parent_answer` is what `delegate action=answer` resolves;
        the person may answer on the page first. (the answer, whether the person gave it).
        When the person's comes first, `parent_answer` is cancelled: a later answer from the
        agent finds the question closed."""
        pending = PendingAsk(
            secrets.token_hex(8), address, conversation_id, "subagent", question, asker=asker
        )

        def elsewhere(answer: object) -> AnsweredElsewhere:
            return AnsweredElsewhere((str(answer),), DASHBOARD)

        def said(answer: str) -> str:
            return f"{answer} (by the agent, in #{conversation_id})"

        answer = await self._race(pending, parent_answer, elsewhere, said)
        by_person = pending.answer.done() and not pending.answer.cancelled()
        return str(answer), by_person

    def answer_approval(self, ask_id: str, choice: str) -> bool:
        """Answer an approval from the dashboard. False when it is answered or gone already;
        AtlasError for a choice it does not offer."""
        pending = self._open.get(ask_id)
        if pending is None or pending.answer.done():
            return False
        if pending.kind != "approval" or choice not in pending.choices:
            raise AtlasError(f"{choice!r} is not one of the choices of this question")
        pending.answer.set_result(choice)
        self._settle(pending, f"{choice} ({DASHBOARD})")  # now: the page's reply shows it closed
        return True

    def answer_questions(self, ask_id: str, answers: list[Answer]) -> bool:
        """Answer a whole question set from the dashboard (one Answer per question)."""
        pending = self._open.get(ask_id)
        if pending is None or pending.answer.done():
            return False
        if pending.kind != "questions" or len(answers) != len(pending.questions):
            raise AtlasError("answer every question of this set")
        if any(not a.chosen and not a.other for a in answers):
            raise AtlasError("every question needs a choice or an answer of your own")
        pending.answer.set_result(QuestionOutcome("submitted", tuple(answers)))
        shown = "; ".join(describe_answer(a) for a in answers)
        self._settle(pending, f"{shown} ({DASHBOARD})")
        return True

    def answer_text(self, ask_id: str, text: str) -> bool:
        """Answer a subagent's question from the dashboard, in words."""
        pending = self._open.get(ask_id)
        if pending is None or pending.answer.done():
            return False
        if pending.kind != "subagent":
            raise AtlasError("this question is answered with its choices, not in words")
        if not text.strip():
            raise AtlasError("the answer is empty: write what the subagent should know")
        pending.answer.set_result(text.strip())
        self._settle(pending, f"{text.strip()} ({DASHBOARD})")
        return True

    async def _race(
        self,
        pending: PendingAsk,
        channel_wait: Awaitable[T],
        elsewhere: Callable[[object], AnsweredElsewhere],
        said: Callable[[T], str],
    ) -> object:
        channel = asyncio.ensure_future(channel_wait)
        self._list(pending)
        try:
            await asyncio.wait({channel, pending.answer}, return_when=asyncio.FIRST_COMPLETED)
            if pending.answer.done():  # the dashboard's answer came first (settled there)
                answer = pending.answer.result()
                channel.cancel(elsewhere(answer))  # the channel shows the answer on closing
                await asyncio.wait({channel})
                return answer
            result = channel.result()
            self._settle(pending, said(result))
            return result
        except asyncio.CancelledError:  # the gate's timeout, /stop: the channel says so
            self._settle(pending, "no answer in time")
            channel.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({channel})
            raise
        finally:
            if not pending.answer.done():
                pending.answer.cancel()  # a late answer from the dashboard finds it closed
            self._settle(pending, "closed")  # a channel that failed

    # ---- a question whose turn waits in a worker process (atlas/workers/asks.py)

    def list_elsewhere(self, pending: PendingAsk, forward: Callable[[object], None]) -> None:
        """List a question that another process's turn waits on. An answer given here (the
        page's) resolves `pending.answer` and settles the entry at once, as for a question of
        this process; `forward` carries it to that process, where the first answer wins."""

        def answered(future: asyncio.Future[object]) -> None:
            if not future.cancelled():
                forward(future.result())

        pending.answer.add_done_callback(answered)
        self._list(pending)

    def close_elsewhere(self, ask_id: str, outcome: str) -> None:
        """The other process's word on how its question ended (the channel's answer, the
        page's, no answer in time). It has the last word: when a chat's answer beat the page's
        there, the entry the page closed shows the chat's."""
        pending = self._open.get(ask_id)
        if pending is not None:
            if not pending.answer.done():
                pending.answer.cancel()  # a late answer from the page finds it closed
            self._settle(pending, outcome)
            return
        for settled in self.settled:
            if settled.id == ask_id and settled.outcome != outcome:
                settled.outcome = outcome
                self._changed()

    def _list(self, pending: PendingAsk) -> None:
        self._open[pending.id] = pending
        self._changed()

    def _settle(self, pending: PendingAsk, outcome: str) -> None:
        """Closed: off the open list, onto the answered one (once), and listeners told."""
        if self._open.pop(pending.id, None) is None:
            return
        pending.outcome = outcome
        pending.settled_at = datetime.now(UTC)
        self.settled.appendleft(pending)
        self._changed()

    def _changed(self) -> None:
        for callback in self._listeners:
            try:
                callback()
            except Exception:  # a listener's bug must not fail the turn's question
                log.exception("pending asks: a listener failed")


__all__ = ["PendingAsk", "PendingAsks"]
