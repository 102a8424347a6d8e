"""A long conversation on the dashboard opens at its end and pages both ways by message id
(5,000 messages: the end in one click, not 83), never splitting a tool call from its result."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.providers.base import Message, ToolCall
from tests.dashboard_rig import Rig, dashboard_rig
from tests.helpers import open_store_for_tests

MESSAGES = 5_000


@pytest.fixture
async def rig(home_path: Path) -> AsyncIterator[Rig]:
    async with dashboard_rig(home_path) as made:
        yield made


def _cursor(page: str, rel: str) -> str:
    found = re.search(rf'\?(before|after)=(\d+)" rel="{rel}"', page)
    assert found is not None, f"no {rel} link"
    return f"{found.group(1)}={found.group(2)}"


def _said(page: str) -> list[int]:
    return [int(n) for n in re.findall(r"message (\d+)<", page)]


async def test_five_thousand_messages_open_at_the_end_and_page_both_ways(rig: Rig) -> None:
    store = await open_store_for_tests(rig.home.bot("atlas"))
    conversation = await store.conversation("console", "long", bot="atlas")
    started = time.monotonic()
    for n in range(MESSAGES):
        if n == MESSAGES - 59:  # a call and its result across the last page's start
            call = ToolCall("call-9", "find_files", "{}")
            await store.append(conversation.id, Message("assistant", "", tool_calls=[call]))
            await store.append(
                conversation.id, Message("tool", "found none", tool_call_id="call-9")
            )
        await store.append(conversation.id, Message("user", f"message {n}"))
    print(f"stored {MESSAGES} messages in {time.monotonic() - started:.1f}s")
    await rig.log_in()
    url = f"/conversations/atlas/{conversation.id}"

    last = await (await rig.client.get(url)).text()
    said = _said(last)
    assert said[-1] == MESSAGES - 1 and 'rel="next"' not in last  # opens at its end
    assert said == list(range(said[0], MESSAGES))
    # The page starts at the call, not at its result alone.
    assert "find_files" in last and "found none" in last

    earlier = await (await rig.client.get(f"{url}?{_cursor(last, 'prev')}")).text()
    before = _said(earlier)
    assert before == list(range(before[0], said[0])) and before[-1] == said[0] - 1

    later = await (await rig.client.get(f"{url}?{_cursor(earlier, 'next')}")).text()
    assert _said(later)[0] == said[0]  # and back again, no gap, no repeat

    start = await (await rig.client.get(f"{url}?after=0")).text()
    assert _said(start)[0] == 0 and 'rel="prev"' not in start and 'rel="next"' in start

    wrong = await rig.client.get(f"{url}?before=soon")
    assert wrong.status == 400 and "before='soon'" in await wrong.text()
