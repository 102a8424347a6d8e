"""A worker's questions on the home's Waiting list (atlas/workers/asks.py), over a real socket
pair: the worker's ForwardedAsks lists each question in the home's PendingAsks; the page's
answer (approval, question set, a subagent's question in words) reaches the worker's wait and
cancels the channel's with AnsweredElsewhere; the chat's answer closes the page's entry, and
corrects it when it beat the page's answer there; a worker that stops closes its entries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from atlas.channels.base import Address, Answer, Question, QuestionOutcome
from atlas.pending_asks import PendingAsks
from atlas.workers.asks import WORKER_STOPPED, ForwardedAsks, serve_asks
from atlas.workers.link import Link, socket_pair
from tests.unit.test_pending_asks import CHOICES, FakeChannelAsk

WHERE = Address("bot01", "telegram:bot01", "5000")


async def eventually(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


@pytest.fixture
async def linked() -> AsyncIterator[tuple[PendingAsks, ForwardedAsks, Link]]:
    home_end, worker_end = socket_pair()
    home_link, worker_link = Link("worker 1"), Link("the home's process")
    home_asks = PendingAsks()

    async def asks() -> PendingAsks:
        return home_asks

    serve_asks(home_link, asks)
    worker_asks = ForwardedAsks(worker_link, 1)
    await home_link.open(home_end)
    await worker_link.open(worker_end)
    yield home_asks, worker_asks, worker_link
    await worker_link.close()
    await home_link.close()


async def test_the_pages_answer_reaches_the_workers_turn_and_the_channel_is_told(
    linked: tuple[PendingAsks, ForwardedAsks, Link],
) -> None:
    home, worker, _ = linked
    channel = FakeChannelAsk()
    turn = asyncio.create_task(worker.approval(WHERE, 7, "Read config.toml?", CHOICES, channel.ask))
    await eventually(lambda: bool(home.open()))
    [listed] = home.open()
    assert (listed.address, listed.conversation_id, listed.share) == (WHERE, 7, 1)
    assert listed.choices == tuple(CHOICES) and listed.question == "Read config.toml?"
    assert home.answer_approval(listed.id, "allow once") is True
    assert await asyncio.wait_for(turn, 5) == "allow once"
    [why] = channel.cancelled_with
    assert why is not None and why.note() == "allow once (on the dashboard)"
    assert home.open() == [] and home.settled[0].outcome == "allow once (on the dashboard)"
    assert worker.open() == []


async def test_the_chats_answer_closes_the_pages_entry(
    linked: tuple[PendingAsks, ForwardedAsks, Link],
) -> None:
    home, worker, _ = linked
    channel = FakeChannelAsk()
    turn = asyncio.create_task(worker.approval(WHERE, 7, "Read it?", CHOICES, channel.ask))
    await eventually(lambda: bool(home.open()))
    ask_id = home.open()[0].id
    channel.tapped.set_result("deny")
    assert await turn == "deny"
    await eventually(lambda: not home.open())
    assert home.settled[0].outcome == "deny (on telegram:bot01)"
    assert home.answer_approval(ask_id, "allow once") is False  # closed


async def test_a_chat_answer_that_beat_the_pages_there_corrects_the_page(
    linked: tuple[PendingAsks, ForwardedAsks, Link],
) -> None:
    home, worker, _ = linked
    channel = FakeChannelAsk()
    turn = asyncio.create_task(worker.approval(WHERE, 7, "Read it?", CHOICES, channel.ask))
    await eventually(lambda: bool(home.open()))
    channel.tapped.set_result("deny")  # in the worker, before the page's answer gets there
    assert home.answer_approval(home.open()[0].id, "allow once") is True
    assert await turn == "deny"
    await eventually(lambda: home.settled[0].outcome == "deny (on telegram:bot01)")
    assert channel.cancelled_with == []


async def test_question_sets_and_a_subagents_question_are_answered_on_the_page(
    linked: tuple[PendingAsks, ForwardedAsks, Link],
) -> None:
    home, worker, _ = linked
    channel = FakeChannelAsk()

    async def never() -> QuestionOutcome:
        await channel.ask()
        return QuestionOutcome("cancelled")

    questions = [Question("Which pier?", ("3", "4"))]
    asked = asyncio.create_task(worker.question_set(WHERE, 7, questions, never))
    await eventually(lambda: bool(home.open()))
    [listed] = home.open()
    assert listed.kind == "questions" and listed.questions == tuple(questions)
    assert home.answer_questions(listed.id, [Answer(("4",), by="the dashboard")]) is True
    outcome = await asyncio.wait_for(asked, 5)
    assert outcome.status == "submitted" and outcome.answers[0].chosen == ("4",)

    parent: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    sub = asyncio.create_task(worker.parent_question(WHERE, 7, "subagent sa-1", "Which?", parent))
    await eventually(lambda: bool(home.open()))
    [listed] = home.open()
    assert (listed.kind, listed.asker) == ("subagent", "subagent sa-1")
    assert home.answer_text(listed.id, "pier 4") is True
    assert await asyncio.wait_for(sub, 5) == ("pier 4", True)
    assert parent.cancelled()  # the agent's later answer finds it closed


async def test_a_worker_that_stops_closes_its_questions_on_the_page(
    linked: tuple[PendingAsks, ForwardedAsks, Link],
) -> None:
    home, worker, worker_link = linked
    channel = FakeChannelAsk()
    turn = asyncio.create_task(worker.approval(WHERE, 7, "Read it?", CHOICES, channel.ask))
    await eventually(lambda: bool(home.open()))
    await worker_link.close()  # the worker process died
    await eventually(lambda: not home.open())
    assert home.settled[0].outcome == WORKER_STOPPED
    turn.cancel()
    await asyncio.gather(turn, return_exceptions=True)


async def test_a_forwarded_chat_questions_wait_in_the_home_ends_after_the_gates_timeout(
    home_path: Path,
) -> None:
    from atlas.dashboard.chat_channel import BrowserChannel, web_address
    from atlas.dashboard.context import ASK_MARGIN
    from tests.dashboard_rig import dashboard_rig

    async with dashboard_rig(home_path) as rig:
        assert rig.dashboard is not None
        rig.dashboard.attach(SimpleNamespace(channels={}, asks=PendingAsks(), services=None))  # type: ignore[arg-type]
        chat = rig.dashboard.chat
        assert chat is not None
        assert chat.wait_limit == rig.home.settings.trust.ask_timeout + ASK_MARGIN
    chat = BrowserChannel()
    chat.wait_limit = 0.01  # nobody cancels a worker's wait here: it ends by itself
    assert await chat.ask(web_address("bot01"), "Read it?", CHOICES) is None
    outcome = await chat.ask_questions(web_address("bot01"), [Question("Which?")])
    assert outcome.status == "cancelled"
