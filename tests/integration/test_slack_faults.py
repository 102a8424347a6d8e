"""Slack as real servers sometimes answer (issue 19, items 1 and 2): a proxy's HTML 502 page, an
empty body, JSON cut short, or a connection closed after Slack posted. Real slack-bolt and
slack_sdk against the fake, with the real Dispatcher: a reply is posted exactly once (Atlas looks
for its own post before posting again), or, when that cannot be checked, once at most and the
person is told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from atlas.channels.send_errors import MAYBE_LOST
from atlas.outbox.rows import open_rows
from atlas.providers.scripted import Reply
from tests.integration.test_slack import Harness, slack, texts  # noqa: F401 (the fixture)

SHAPES = [
    ("html502", None),  # nginx's page: Slack never saw the post
    ("empty", None),
    ("truncated", 502),
    ("truncated", None),  # 200, cut short: Slack posted it
    ("empty", 200),  # posted, and the answer was empty
    ("drop_after", None),
]


async def owed_answers(h: Harness) -> list[Any]:
    """What a restart now would send again (or say may be lost): the open outbox rows."""
    await h.dispatcher.outbox.drained()
    store = await h.runtime.store(h.home.bot("atlas"))
    later = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return await store.db.quick(lambda db: open_rows(db, "atlas", before=later))


@pytest.mark.parametrize(("shape", "status"), SHAPES)
async def test_a_post_in_any_failure_shape_arrives_exactly_once(
    slack: Harness,  # noqa: F811
    shape: str,
    status: int | None,
) -> None:
    slack.model.add(Reply("delivered"))
    slack.fake.fail("chat.postMessage", shape, status=status)
    await slack.fake.push_event(slack.dm("hi"))
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["delivered"]
    assert await owed_answers(slack) == []
    assert not slack.fake._failures["chat.postMessage"], "the fault was met"


async def test_a_post_that_cannot_be_checked_is_not_repeated_and_the_person_is_told(
    slack: Harness,  # noqa: F811
) -> None:
    """Without the *:history scopes Atlas cannot look for a post whose answer was lost: it
    posts nothing again, even with the next reply, and says the reply may be missing."""
    slack.model.add(Reply("delivered"), Reply("the next one"))
    slack.fake.fail("chat.postMessage", "drop_after")
    slack.fake.fail("conversations.history", "missing_scope")
    await slack.fake.push_event(slack.dm("hi"))
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["delivered", MAYBE_LOST]
    await slack.fake.push_event(slack.dm("and?"))
    await slack.fake.wait_for(lambda: "the next one" in texts(slack.fake))
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["delivered", MAYBE_LOST, "the next one"]
    assert await owed_answers(slack) == []


async def test_an_edit_answered_with_a_502_page_is_made_again(
    slack: Harness,  # noqa: F811
) -> None:
    """chat.update is safe to repeat: an unreadable answer is retried like a 5xx."""
    sender = slack.channel.sender
    ts = await sender.post("D0001", "before")
    slack.fake.fail("chat.update", "truncated", status=502)
    slack.fake.fail("chat.update", "empty", status=200)
    await sender.call("chat.update", channel="D0001", ts=ts, text="after")
    assert texts(slack.fake) == ["after"]
    assert len(slack.fake.calls_of("chat.update")) == 2  # the 502 never reached Slack
