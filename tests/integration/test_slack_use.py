"""Slack as people use it (issue #35): a rate-limited reaction never holds the answer back,
`!stop` says "Stopped." once (the dashboard's /stop too), the Events endpoint turns bad
requests away quietly, long code is split at safe points, a revoked token stops the channel,
an approval shows the whole command, and a store that cannot write leaves Slack's event
unacknowledged. Real slack-bolt and slack_sdk against the fake Slack on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from atlas.home import Home
from atlas.providers.scripted import Reply
from tests.integration.test_slack import Harness, close_harness, make_harness, texts


@pytest.fixture
async def slack(home: Home, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    """The Slack rig of test_slack.py, in Socket Mode."""
    h = await make_harness(home, monkeypatch)
    await h.fake.wait_connected()
    yield h
    await close_harness(h)


async def test_a_rate_limited_reaction_does_not_delay_the_reply(slack: Harness) -> None:
    for method in ("reactions.add", "reactions.remove"):
        slack.fake.fail(method, "429", times=3, retry_after=6)
    slack.model.add(Reply("right away"))
    began = time.monotonic()
    await slack.fake.push_event(slack.dm("hello"))
    await slack.fake.wait_for(lambda: texts(slack.fake) == ["right away"], timeout=30)
    took = time.monotonic() - began
    assert took < 2, f"the reply took {took:.1f} s behind 429s with Retry-After 6"
    # The mark was tried once and not waited for: no retry after the 429.
    assert [c.method for c in slack.fake.calls if "reactions" in c.method] == [
        "reactions.add (429)"
    ]


async def test_the_mark_comes_off_after_it_went_on(slack: Harness) -> None:
    gate = slack.fake.hold("reactions.add")  # the addition is slow to answer
    slack.model.add(Reply("done"))
    await slack.fake.push_event(slack.dm("hello"))
    await slack.fake.wait_for(lambda: texts(slack.fake) == ["done"])
    assert slack.fake.calls_of("reactions.remove") == []  # not before its addition ended
    gate.set()
    await slack.fake.wait_for(lambda: len(slack.fake.calls_of("reactions.remove")) == 1)


async def test_stop_says_stopped_once(slack: Harness) -> None:
    never = asyncio.Event()
    slack.model.add(Reply("never said", wait_for=never), Reply("fresh"))
    await slack.fake.push_event(slack.dm("think hard"))
    await slack.fake.wait_for(lambda: len(slack.model.requests) == 1)
    await slack.fake.push_event(slack.dm("!stop"))
    await slack.fake.wait_for(lambda: "Stopped." in texts(slack.fake))
    await slack.fake.push_event(slack.dm("next"))
    await slack.fake.wait_for(lambda: "fresh" in texts(slack.fake))
    assert texts(slack.fake) == ["Stopped.", "fresh"]


async def test_the_dashboard_chats_stop_says_stopped_once(home_path) -> None:  # type: ignore[no-untyped-def]
    from tests.unit.test_dashboard_chat import chat_rig, next_event

    async with chat_rig(home_path) as rig:
        csrf = await rig.log_in()
        never = asyncio.Event()
        rig.model.add(Reply("never said", wait_for=never), Reply("fresh"))
        rig.model.release.set()  # no half-way holds in this test
        stream = await rig.client.get("/chat/atlas/stream")
        await rig.client.post("/chat/atlas", data={"text": "Think hard", "csrf": csrf})
        for _ in range(500):
            if rig.model.requests:
                break
            await asyncio.sleep(0.01)
        await rig.client.post("/chat/atlas", data={"text": "/stop", "csrf": csrf})
        await rig.client.post("/chat/atlas", data={"text": "next", "csrf": csrf})
        said: list[str] = []
        while not any("fresh" in text and name == "message" for name, text in said):
            said.append(await next_event(stream))  # type: ignore[arg-type]
        stream.close()
        stopped = [text for name, text in said if name == "message" and "Stopped." in text]
        assert len(stopped) == 1, said
