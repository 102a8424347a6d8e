"""The answers so far to one `ask_user` call on a chat platform, and the wait for all of them.

Telegram and Slack put each question in its own message with its own buttons; a person answers
them in any order. `QuestionSet` keeps what was chosen and resolves `outcome` once every
question has an answer (or someone cancels). Buttons name their set, question and action in
one string, `<request id>:<question>:<action>`: `c<n>` picks (or, in multi-select, toggles)
choice n, `s` reports the whole multi-select selection (Slack's checkboxes), `d` is Done, `o`
is Other (free text), `x` cancels the whole set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from atlas.channels.base import (
    Answer,
    AnsweredElsewhere,
    Question,
    QuestionOutcome,
    QuestionStatus,
    answered_elsewhere,
)

log = logging.getLogger(__name__)

CHOOSE, SELECT, DONE, OTHER_TEXT, CANCEL = "c", "s", "d", "o", "x"


@dataclass(frozen=True)
class QuestionAction:
    request_id: str
    question: int
    action: str  # CHOOSE, SELECT, DONE, OTHER_TEXT or CANCEL
    choice: int = -1  # for CHOOSE


def action_key(request_id: str, question: int, action: str, choice: int | None = None) -> str:
    """What a button carries: its set, its question and what it does."""
    return f"{request_id}:{question}:{action}{'' if choice is None else choice}"


def parse_action(key: str) -> QuestionAction | None:
    """A button's key → the action it stands for; None when it is not one of ours."""
    parts = key.split(":")
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not parts[2]:
        return None
    request_id, question, action = parts[0], int(parts[1]), parts[2]
    kind, number = action[0], action[1:]
    if kind == CHOOSE and number.isdigit():
        return QuestionAction(request_id, question, CHOOSE, int(number))
    if kind in (SELECT, DONE, OTHER_TEXT, CANCEL) and not number:
        return QuestionAction(request_id, question, kind)
    return None


def describe_answer(answer: Answer) -> str:
    """An answer in one line: `A, B`, or `A; other: "…"`."""
    parts = list(answer.chosen)
    if answer.other:
        parts.append(f"other: “{answer.other}”")
    return ", ".join(parts) if parts else "(nothing)"


class QuestionSet:
    """One ask_user call's questions on a chat platform; `outcome` resolves when it ends."""

    def __init__(self, request_id: str, questions: list[Question]) -> None:
        self.request_id = request_id
        self.questions = questions
        self.answers: list[Answer | None] = [None] * len(questions)
        self.selected: list[set[int]] = [set() for _ in questions]  # multi-select toggles
        self.outcome: asyncio.Future[QuestionOutcome] = asyncio.get_running_loop().create_future()

    @property
    def closed(self) -> bool:
        return self.outcome.done()

    def is_open(self, question: int) -> bool:
        """Still waiting for an answer to this question."""
        return (
            not self.closed
            and 0 <= question < len(self.questions)
            and self.answers[question] is None
        )

    def valid_choice(self, question: int, choice: int) -> bool:
        return self.is_open(question) and 0 <= choice < len(self.questions[question].choices)

    def toggle(self, question: int, choice: int) -> None:
        """Multi-select: flip one choice on or off."""
        self.selected[question] ^= {choice}

    def choose(self, question: int, choice: int, by: str) -> Answer:
        """Single select: this choice answers the question."""
        return self._answer(question, Answer((self.questions[question].choices[choice],), by=by))

    def done(self, question: int, by: str, selected: set[int] | None = None) -> Answer | None:
        """Multi-select: the toggled choices answer it; None while nothing is picked."""
        if selected is not None:
            self.selected[question] = set(selected)
        picked = self._picked(question)
        if not picked:
            return None
        return self._answer(question, Answer(picked, by=by))

    def write(self, question: int, text: str, by: str) -> Answer:
        """Other: free text answers the question (with any toggled choices, in multi-select)."""
        picked = self._picked(question) if self.questions[question].multi_select else ()
        return self._answer(question, Answer(picked, other=text.strip(), by=by))

    def cancel(self, detail: str) -> None:
        if not self.closed:
            self.outcome.set_result(QuestionOutcome("cancelled", detail=detail))

    def open_questions(self) -> list[int]:
        return [i for i, answer in enumerate(self.answers) if answer is None]

    def _picked(self, question: int) -> tuple[str, ...]:
        choices = self.questions[question].choices
        return tuple(choices[i] for i in sorted(self.selected[question]) if i < len(choices))

    def _answer(self, question: int, answer: Answer) -> Answer:
        self.answers[question] = answer
        if all(a is not None for a in self.answers) and not self.closed:
            answers = tuple(a for a in self.answers if a is not None)
            self.outcome.set_result(QuestionOutcome("submitted", answers))
        return answer


async def collect_answers(
    asked: QuestionSet,
    open_sets: dict[str, Any],
    *,
    post: Callable[[int], Awaitable[None]],
    close: Callable[[int, QuestionStatus, str], Awaitable[None]],
    undeliverable: type[Exception],
    in_background: Callable[[Coroutine[Any, Any, None]], None],
    where: str,
) -> QuestionOutcome:
    """Post each question (`post(index)`), then wait for every answer; `asked` is findable in
    `open_sets` meanwhile. However the wait ends short of answers, each question still open is
    closed with `close(index, status, detail)`: undelivered when a post fails, "timed out" when
    the wait is cancelled (in the background, as the caller is cancelled), or cancelled."""

    async def close_open(status: QuestionStatus, detail: str = "") -> None:
        for index in asked.open_questions():
            await close(index, status, detail)

    async def close_each(elsewhere: AnsweredElsewhere) -> None:
        for index in asked.open_questions():
            await close(index, "cancelled", elsewhere.note(index))

    open_sets[asked.request_id] = asked
    try:
        for index in range(len(asked.questions)):
            try:
                await post(index)
            except undeliverable as exc:
                log.warning("%s: could not put the questions: %s", where, exc)
                asked.cancel("undelivered")
                await close_open("undelivered")
                return QuestionOutcome("undelivered", detail=str(exc))
        outcome = await asked.outcome
    except asyncio.CancelledError as cancel:
        elsewhere = answered_elsewhere(cancel)
        if elsewhere is None:
            in_background(close_open("timed out"))
        else:  # the dashboard answered first: each open question shows its answer
            in_background(close_each(elsewhere))
        raise
    finally:
        open_sets.pop(asked.request_id, None)
    if outcome.status == "cancelled":
        await close_open("cancelled", outcome.detail)
    return outcome


__all__ = [
    "CANCEL",
    "CHOOSE",
    "DONE",
    "OTHER_TEXT",
    "QuestionAction",
    "QuestionSet",
    "SELECT",
    "action_key",
    "collect_answers",
    "describe_answer",
    "parse_action",
]
