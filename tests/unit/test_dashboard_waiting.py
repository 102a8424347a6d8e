"""The Waiting page: what turns wait on, answered here; CSRF refused; the first answer wins."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.channels.base import Address, Question, QuestionOutcome
from atlas.pending_asks import PendingAsks
from tests.dashboard_rig import Rig, dashboard_rig

WHERE = Address("atlas", "telegram:atlas", "1")


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


def asks_of(rig: Rig) -> PendingAsks:
    assert rig.dashboard is not None
    return rig.dashboard.asks


async def open_id(asks: PendingAsks) -> str:
    for _ in range(100):
        if asks.open():
            return asks.open()[0].id
        await asyncio.sleep(0)
    raise AssertionError("nothing was put")


async def test_an_approval_is_listed_and_answered_here_once(rig: Rig) -> None:
    csrf = await rig.log_in()
    asks = asks_of(rig)
    tap: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    turn = asyncio.create_task(
        asks.approval(WHERE, 4, "Run `make deploy`?", ["allow once", "deny"], lambda: tap)
    )
    ask_id = await open_id(asks)
    page = await (await rig.client.get("/waiting")).text()
    assert "Run `make deploy`?" in page and f"/waiting/{ask_id}/approval" in page
    assert 'hx-trigger="live:waiting from:body' in page and "telegram:atlas" in page
    refused = await rig.client.post(f"/waiting/{ask_id}/approval", data={"choice": "allow once"})
    assert refused.status == 403 and not turn.done()  # no CSRF token: nothing answered
    answer = await rig.client.post(
        f"/waiting/{ask_id}/approval",
        data={"choice": "allow once", "csrf": csrf},
        headers={"HX-Request": "true"},
    )
    body = await answer.text()
    assert answer.status == 200 and "Answered: allow once." in body
    assert "/approval" not in body  # closed at once: the reply never shows it still open
    assert await turn == "allow once"
    again = await rig.client.post(
        f"/waiting/{ask_id}/approval",
        data={"choice": "deny", "csrf": csrf},
        headers={"HX-Request": "true"},
    )
    assert "already answered" in await again.text()
    page = await (await rig.client.get("/waiting")).text()
    assert "Nothing is waiting for you." in page
    assert "allow once (on the dashboard)" in page  # the answered list says where


async def test_the_channel_answers_first_and_the_page_shows_it(rig: Rig) -> None:
    await rig.log_in()
    asks = asks_of(rig)
    tap: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    turn = asyncio.create_task(
        asks.approval(WHERE, 4, "Shout?", ["allow once", "deny"], lambda: tap)
    )
    await open_id(asks)
    tap.set_result("deny")
    assert await turn == "deny"
    live = await (await rig.client.get("/waiting/live", headers={"HX-Request": "true"})).text()
    assert "deny (on telegram:atlas)" in live and "/approval" not in live


async def test_a_question_set_is_answered_with_choices_and_words(rig: Rig) -> None:
    csrf = await rig.log_in()
    asks = asks_of(rig)
    never: asyncio.Future[QuestionOutcome] = asyncio.get_running_loop().create_future()
    questions = [
        Question("Which database?", ("Postgres", "SQLite")),
        Question("Which days?", ("Mon", "Tue", "Wed"), multi_select=True),
    ]
    turn = asyncio.create_task(asks.question_set(WHERE, 4, questions, lambda: never))
    ask_id = await open_id(asks)
    page = await (await rig.client.get("/waiting")).text()
    assert re.search(r'type="checkbox" name="q1" value="Tue"', page)
    data = [("csrf", csrf), ("q0", "SQLite"), ("q1", "Mon"), ("q1", "Wed"), ("q1-other", "Fri")]
    answer = await rig.client.post(f"/waiting/{ask_id}/questions", data=data, allow_redirects=False)
    assert answer.status == 303
    outcome = await turn
    assert outcome.status == "submitted"
    assert outcome.answers[0].chosen == ("SQLite",)
    assert outcome.answers[1].chosen == ("Mon", "Wed") and outcome.answers[1].other == "Fri"


async def test_waiting_changes_publish_the_event_pages_listen_to(rig: Rig) -> None:
    assert rig.dashboard is not None
    with rig.dashboard.events.subscribe() as queue:
        tap: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        turn = asyncio.create_task(asks_of(rig).approval(WHERE, 4, "Q?", ["deny"], lambda: tap))
        assert await asyncio.wait_for(queue.get(), 5) == "waiting"
        tap.set_result("deny")
        await turn
        assert await asyncio.wait_for(queue.get(), 5) == "waiting"


async def test_a_subagents_question_is_listed_and_answered_here(rig: Rig) -> None:
    """A subagent's ask_parent question (PendingAsks.parent_question, as SubagentManager puts
    it) shows on Waiting with who asks; the person's answer wins over the parent agent's."""
    csrf = await rig.log_in()
    asks = asks_of(rig)
    parent: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asking = asyncio.create_task(
        asks.parent_question(WHERE, 4, "subagent sa-1a2b3c", "Which city?", parent)
    )
    ask_id = await open_id(asks)
    page = await (await rig.client.get("/waiting")).text()
    assert "subagent&#39;s question" in page and "Subagent sa-1a2b3c asks the agent" in page
    assert "Which city?" in page and f'action="/waiting/{ask_id}/subagent"' in page
    refused = await rig.client.post(f"/waiting/{ask_id}/subagent", data={"answer": "Porto"})
    assert refused.status == 403 and not asking.done()  # no CSRF token
    empty = await rig.client.post(f"/waiting/{ask_id}/subagent", data={"answer": " ", "csrf": csrf})
    assert empty.status == 400 and "the answer is empty" in await empty.text()
    answer = await rig.client.post(
        f"/waiting/{ask_id}/subagent",
        data={"answer": "Porto", "csrf": csrf},
        headers={"HX-Request": "true"},
    )
    body = await answer.text()
    assert answer.status == 200 and "Answered subagent sa-1a2b3c." in body
    assert "subagent sa-1a2b3c asked: Which city?" in body and "Porto (on the dashboard)" in body
    assert await asking == ("Porto", True)
    assert parent.cancelled()  # the parent agent's answer now finds the question closed


async def test_the_parent_agent_answers_first_and_the_page_says_so(rig: Rig) -> None:
    await rig.log_in()
    asks = asks_of(rig)
    parent: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asking = asyncio.create_task(asks.parent_question(WHERE, 4, "subagent sa-9", "Q?", parent))
    await open_id(asks)
    parent.set_result("Lisbon")
    assert await asking == ("Lisbon", False)
    live = await (await rig.client.get("/waiting/live", headers={"HX-Request": "true"})).text()
    assert "Lisbon (by the agent, in #4)" in live and "/subagent" not in live
