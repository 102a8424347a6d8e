"""Files out on Slack: a tool attaches a file, and the real slack_sdk uploads it to the fake Slack
(files.getUploadURLExternal, the bytes to the URL it gave, files.completeUploadExternal) into the
conversation's channel and thread, exactly once through 429s, 5xx and dropped connections."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.providers.scripted import Reply
from atlas.tools.attach import ATTACH_TOOLS
from tests.fakes.slack_server import BOT_USER_ID
from tests.integration.test_slack import (
    DM,
    GENERAL,
    Harness,
    close_harness,
    make_harness,
    texts,
)

REPORT = b"quarter,revenue\nQ1,10\nQ2,12\n"


@pytest.fixture
async def slack(home: Home, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    h = await make_harness(home, monkeypatch, tools=ATTACH_TOOLS)
    await h.fake.wait_connected()
    yield h
    await close_harness(h)


def _workspace_file(h: Harness, name: str, data: bytes) -> Path:
    path = h.home.bot("atlas").workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


async def test_an_attached_file_is_uploaded_into_the_thread(slack: Harness) -> None:
    _workspace_file(slack, "report.csv", REPORT)
    slack.model.add(Reply(calls=[("attach_file", {"path": "report.csv"})]), Reply("The report."))
    mention = slack.in_channel(f"<@{BOT_USER_ID}> the report please", kind="app_mention")
    await slack.fake.push_event(mention)
    root = mention["ts"]
    await slack.idle(slack.address(GENERAL, root))
    assert texts(slack.fake) == ["The report."]
    [shared] = slack.fake.shared
    assert (shared.channel, shared.thread_ts) == (GENERAL, root)
    assert (shared.name, shared.data) == ("report.csv", REPORT)
    assert [c.method for c in slack.fake.calls if "upload" in c.method.lower()] == [
        "files.getUploadURLExternal",
        "upload",
        "files.completeUploadExternal",
    ]
    text_at = next(i for i, c in enumerate(slack.fake.calls) if c.method == "chat.postMessage")
    upload_at = next(
        i for i, c in enumerate(slack.fake.calls) if c.method == "files.getUploadURLExternal"
    )
    assert text_at < upload_at, "the text goes first, the file after it"


async def test_upload_survives_429_5xx_and_drops_sharing_once(slack: Harness) -> None:
    path = _workspace_file(slack, "chart.png", b"\x89PNG not really")
    slack.fake.fail("files.getUploadURLExternal", "429", retry_after=0)
    slack.fake.fail("upload", "500")
    slack.fake.fail("upload", "drop_before")
    # Slack shares the file but the answer is lost: completing again would share it twice.
    slack.fake.fail("files.completeUploadExternal", "drop_after")
    await slack.channel.send(slack.address(), "A chart.", [path])
    assert texts(slack.fake) == ["A chart."]
    [shared] = slack.fake.shared
    assert (shared.channel, shared.thread_ts, shared.name) == (DM, None, "chart.png")
    assert len(slack.fake.calls_of("files.completeUploadExternal")) == 1
    assert slack.fake.calls_of("files.info"), "it looked before completing again"


async def test_a_completion_lost_before_slack_acted_is_sent_again(slack: Harness) -> None:
    path = _workspace_file(slack, "notes.txt", b"notes")
    slack.fake.fail("files.completeUploadExternal", "500")
    await slack.channel.send(slack.address(), "Notes.", [path])
    [shared] = slack.fake.shared
    assert shared.name == "notes.txt"


async def test_a_file_slack_refuses_is_named_in_the_reply(slack: Harness) -> None:
    path = _workspace_file(slack, "secret.bin", b"\x00\x01")
    slack.fake.fail("upload", "500", times=10)  # every attempt fails
    await slack.channel.send(slack.address(), "Here you go.", [path])
    posted = texts(slack.fake)
    assert posted[0] == "Here you go."
    assert len(posted) == 2 and "secret.bin" in posted[1] and "failed after" in posted[1]
    assert slack.fake.shared == []


async def test_a_missing_file_is_named_and_the_text_still_goes(slack: Harness) -> None:
    missing = slack.home.bot("atlas").workspace / "gone.pdf"
    await slack.channel.send(slack.address(), "Summary.", [missing])
    [text] = texts(slack.fake)
    assert text.startswith("Summary.") and "gone.pdf" in text and "cannot be read" in text
    assert not slack.fake.calls_of("files.getUploadURLExternal")
