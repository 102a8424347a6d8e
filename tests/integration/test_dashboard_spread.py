"""A spread bot's question, answered on the dashboard: the conversation is held by worker 1,
the bot's Telegram channel runs in the home's process, and the page's answer reaches both:
the turn goes on in the worker, and the Telegram question (posted by the home's process) is
edited to show the page's answer. The cancel of the channel's wait crosses the link with its
reason (atlas/workers/link.py, "cancel")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.home import Home
from atlas.trust.gate import ALLOW_ONCE
from atlas.workers.plan import Placement
from scripts.loadkit import FIRST_CHAT, Fakes
from tests.helpers import worker_fakes
from tests.integration.test_dashboard_workers import (
    Page,
    daemon_with_a_page,
    read_config_call,
    waiting_ask,
)

CHATS = 8


@pytest.fixture
async def spread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Home, Fakes, Page]]:  # fmt: skip
    async with worker_fakes(monkeypatch, 1) as fakes:
        root = tmp_path / "home"
        fakes.write_home(root, conversations=CHATS, workers=2, spread=True)
        home = Home(root)
        async with daemon_with_a_page(home, fakes) as page:
            yield home, fakes, page


async def test_a_spread_bots_question_answered_on_the_page_is_closed_on_telegram(
    spread: tuple[Home, Fakes, Page],
) -> None:
    home, fakes, page = spread
    placement = Placement.of(home, 2)
    chat = next(
        c
        for c in range(FIRST_CHAT, FIRST_CHAT + CHATS)
        if placement.share_for(Address("atlas", "telegram:atlas", str(c))) == 1
    )
    assert placement.owner("atlas") == 0  # the channel is the home's; the conversation is not
    # A read of the home's config.toml: the gate asks the person in every mode.
    telegram = fakes.telegrams[0]
    fakes.model.reply(calls=[read_config_call(home)])
    await telegram.push(telegram.message(f"T0-{chat}-1 read the config", user_id=chat))
    ask_id = await waiting_ask(page, "wants to read")
    # The page may list the question before its post to Telegram has arrived.
    await telegram.wait_for(
        lambda: any("wants to read" in m["text"] for m in telegram.messages.values()), timeout=10
    )
    [question_id] = [i for i, m in telegram.messages.items() if "wants to read" in m["text"]]

    await page.post(f"/waiting/{ask_id}/approval", htmx=True, choice=ALLOW_ONCE)
    await telegram.wait_for(
        lambda: any(f"T0-{chat}-1 done" in t for t in telegram.sent_texts(chat)), timeout=30
    )
    await telegram.wait_for(lambda: "edited" in telegram.messages[question_id], timeout=10)
    edited = telegram.messages[question_id]
    assert f"{ALLOW_ONCE} (on the dashboard)" in edited["text"]
    assert "reply_markup" not in edited["edited"]  # no buttons left to tap
