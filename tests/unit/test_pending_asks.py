"""The home-wide registry of questions turns wait on (atlas/pending_asks.py): the first answer
wins, from the channel or the dashboard, and the channel is told which."""

from __future__ import annotations

import asyncio

import pytest

from atlas.channels.base import Address, Answer, Question, QuestionOutcome, answered_elsewhere
from atlas.errors import AtlasError
from atlas.pending_asks import PendingAsks

WHERE = Address("atlas", "telegram:atlas", "1")
CHOICES = ["allow once", "deny"]


class FakeChannelAsk:
    """A channel's wait for a tap: answered by `tap`, and what cancelled it is kept."""

    def __init__(self) -> None:
        self.tapped: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.cancelled_with: list[object] = []

    async def ask(self) -> str | None:
        try:
            return await self.tapped
        except asyncio.CancelledError as cancel:
            self.cancelled_with.append(answered_elsewhere(cancel))
            raise


async def until_open(asks: PendingAsks) -> str:
    for _ in range(100):
        if asks.open():
            return asks.open()[0].id
        await asyncio.sleep(0)
    raise AssertionError("nothing was put")


async def test_the_dashboard_answers_first_and_the_channel_is_told_the_answer() -> None:
    asks = PendingAsks()
    changes: list[int] = []
    asks.listen(lambda: changes.append(len(asks.open())))
    channel = FakeChannelAsk()
    turn = asyncio.create_task(asks.approval(WHERE, 7, "Shout?", CHOICES, channel.ask))
    ask_id = await until_open(asks)
    with pytest.raises(AtlasError, match="not one of the choices"):
        asks.answer_approval(ask_id, "allow forever")
    assert asks.answer_approval(ask_id, "allow once") is True
    assert await turn == "allow once"
    [why] = channel.cancelled_with
    assert why is not None and why.note() == "allow once (on the dashboard)"
    assert asks.open() == [] and changes == [1, 0]
    assert asks.settled[0].outcome == "allow once (on the dashboard)"
    assert asks.answer_approval(ask_id, "deny") is False  # a second answer finds it closed


async def test_the_channel_answers_first_and_the_dashboard_finds_it_closed() -> None:
    asks = PendingAsks()
    channel = FakeChannelAsk()
    turn = asyncio.create_task(asks.approval(WHERE, 7, "Shout?", CHOICES, channel.ask))
    ask_id = await until_open(asks)
    channel.tapped.set_result("deny")
    assert await turn == "deny"
    assert channel.cancelled_with == []
    assert asks.answer_approval(ask_id, "allow once") is False
    assert asks.settled[0].outcome == "deny (on telegram:atlas)"


async def test_a_timeout_cancels_the_channel_plainly_and_closes_the_entry() -> None:
    asks = PendingAsks()
    channel = FakeChannelAsk()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asks.approval(WHERE, 7, "Shout?", CHOICES, channel.ask), 0.05)
    assert channel.cancelled_with == [None]  # "no answer in time", not an answer
    assert asks.open() == [] and asks.settled[0].outcome == "no answer in time"


async def test_a_question_set_answered_on_the_dashboard() -> None:
    asks = PendingAsks()
    cancelled: list[object] = []

    async def channel_questions() -> QuestionOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as cancel:
            cancelled.append(answered_elsewhere(cancel))
            raise
        raise AssertionError

    questions = [Question("Which database?", ("Postgres", "SQLite")), Question("Name?")]
    turn = asyncio.create_task(asks.question_set(WHERE, 3, questions, channel_questions))
    ask_id = await until_open(asks)
    with pytest.raises(AtlasError, match="every question"):
        asks.answer_questions(ask_id, [Answer(("SQLite",)), Answer()])
    assert asks.answer_questions(ask_id, [Answer(("SQLite",)), Answer(other="atlas")])
    outcome = await turn
    assert outcome.status == "submitted" and outcome.answers[1].other == "atlas"
    [why] = cancelled
    assert why is not None and why.note(0) == "SQLite (on the dashboard)"
    assert why.note(1) == "other: “atlas” (on the dashboard)"
