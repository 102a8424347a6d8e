"""Conversations are named by the person (or called a group), not by chat id; a turn that waits
on the person links to Waiting; Waiting's "Answered lately" says when."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.providers.base import Message
from tests.dashboard_rig import Rig, dashboard_rig
from tests.helpers import open_store_for_tests


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


async def test_conversations_are_named_by_the_person_or_the_group(rig: Rig) -> None:
    store = await open_store_for_tests(rig.home.bot("atlas"))
    ada = await store.conversation("telegram:atlas", "4242", bot="atlas")
    group = await store.conversation("telegram:atlas", "-1001234", bot="atlas")
    browser = await store.conversation("dashboard", "browser", bot="atlas")
    for conversation in (ada, group, browser):
        await store.append(conversation.id, Message("user", "hello"))
    await rig.audit.call(
        lambda db: db["paired_users"].insert(
            {
                "bot": "atlas",
                "platform": "telegram",
                "user_id": "4242",
                "user_name": "Ada Lovelace",
                "code": "X",
                "approved_at": "2026-12-01T10:00:00+00:00",
            }
        )
    )
    await rig.log_in()
    listing = await (await rig.client.get("/conversations?bot=atlas")).text()
    assert f'href="/conversations/atlas/{ada.id}">Ada Lovelace</a>' in listing
    assert f'href="/conversations/atlas/{group.id}">Telegram group -1001234</a>' in listing
    assert f'href="/conversations/atlas/{browser.id}">Chat on the dashboard</a>' in listing
    page = await (await rig.client.get(f"/conversations/atlas/{ada.id}")).text()
    assert "<h1>Ada Lovelace <span" in page
    found = await (await rig.client.get("/conversations?q=hello")).text()
    assert '>Ada Lovelace <span class="sub">atlas #' in found


async def test_a_turn_waiting_on_an_approval_links_to_waiting_which_says_when_answered(
    rig: Rig,
) -> None:
    assert rig.dashboard is not None
    store = await open_store_for_tests(rig.home.bot("atlas"))
    conversation = await store.conversation("telegram:atlas", "4242", bot="atlas")
    await store.append(conversation.id, Message("user", "deploy it"))
    csrf = await rig.log_in()
    asks = rig.dashboard.asks
    tap: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    where = Address("atlas", "telegram:atlas", "4242")
    turn = asyncio.create_task(
        asks.approval(where, conversation.id, "Run `make deploy`?", ["allow once"], lambda: tap)
    )
    for _ in range(100):
        if asks.open():
            break
        await asyncio.sleep(0)
    [ask] = asks.open()
    listing = await (await rig.client.get("/conversations?bot=atlas")).text()
    assert '<a href="/waiting" class="problem">Waiting for your answer</a>' in listing
    page = await (await rig.client.get(f"/conversations/atlas/{conversation.id}")).text()
    assert f'<a href="/waiting#ask-{ask.id}">Run `make deploy`?</a>' in page

    answered = await rig.client.post(
        f"/waiting/{ask.id}/approval", data={"choice": "allow once", "csrf": csrf}
    )
    assert answered.status == 200 and await turn == "allow once"
    live = await (await rig.client.get("/waiting/live")).text()
    settled = live[live.index("Answered lately") :]
    assert ask.settled_at is not None
    assert f'<time datetime="{ask.settled_at.isoformat()}">' in settled
    page = await (await rig.client.get(f"/conversations/atlas/{conversation.id}")).text()
    assert "/waiting#ask-" not in page
