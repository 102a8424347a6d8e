"""Slack as people use it (issue #35): a rate-limited reaction never holds the answer back,
`!stop` says "Stopped." once (the dashboard's /stop too), the Events endpoint turns bad
requests away quietly, long code is split at safe points, a revoked token stops the channel,
an approval shows the whole command, and a store that cannot write leaves Slack's event
unacknowledged. Real slack-bolt and slack_sdk against the fake Slack on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from atlas.channels.slack.format import SLACK_TEXT_LIMIT, escape_mrkdwn
from atlas.home import Home
from atlas.providers.scripted import Reply
from tests.fakes.slack_server import Posted
from tests.integration.test_slack import DM, Harness, close_harness, make_harness, texts
from tests.integration.test_slack import _free_port as free_port


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


def signed(body: str, secret: str = "signing-secret") -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
        "Content-Type": "application/json",
    }


@pytest.fixture
async def over_http(home: Home, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    """The Slack rig serving the Events API on a free loopback port (`h.events_url`)."""
    port = free_port()
    h = await make_harness(home, monkeypatch, extra=f'mode = "http"\nhttp_port = {port}')
    h.events_url = f"http://127.0.0.1:{port}/slack/events"  # type: ignore[attr-defined]
    yield h
    await close_harness(h)


async def test_unsigned_or_malformed_requests_get_a_4xx_and_one_log_line(
    over_http: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    url = over_http.events_url  # type: ignore[attr-defined]
    unsigned = {"Content-Type": "application/json"}
    bad_stamp = {**signed("{"), "X-Slack-Request-Timestamp": "soon"}
    cases = [
        ("{not json", unsigned, 401),  # before anything is read: the signature
        ("{not json", {**signed("{not json"), "X-Slack-Signature": "v0=" + "0" * 64}, 401),
        ("{", bad_stamp, 401),
        ("{not json", signed("{not json"), 400),
        ("[1, 2]", signed("[1, 2]"), 400),
        ("", signed(""), 400),
    ]
    async with aiohttp.ClientSession() as session:
        for body, headers, status in cases:
            caplog.clear()
            with caplog.at_level(logging.DEBUG):
                async with session.post(url, data=body, headers=headers) as response:
                    assert response.status == status, (body, headers)
            mine = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(mine) == 1, [r.getMessage() for r in mine]
            assert mine[0].exc_info is None and "Traceback" not in caplog.text
            assert "refused a request to the Events API" in mine[0].getMessage()
    # A good request is still served.
    over_http.model.add(Reply("over http"))
    body = json.dumps(
        {
            "type": "event_callback",
            "team_id": "T0001",
            "api_app_id": "A0001",
            "event_id": "EvGOOD",
            "event": over_http.dm("hi"),
        }
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=signed(body)) as response,
    ):
        assert response.status == 200
    await over_http.fake.wait_for(lambda: texts(over_http.fake) == ["over http"])


BROKEN_ESCAPE = re.compile(r"&(?!(?:lt|gt|amp);)")


async def test_a_40000_character_line_of_code_is_split_only_at_safe_points(
    slack: Harness,
) -> None:
    # No space or newline to cut at; escapes, an emoji with a skin tone, a family joined by
    # zero-width joiners and a combining accent all along the line.
    unit = "a<b&&c>d👍🏽e👨\u200d👩\u200d👧f" + "e\u0301"
    line = (unit * (40_000 // len(unit) + 1))[:40_000]
    slack.model.add(Reply("Here:\n\n```\n" + line + "\n```\n\nDone."))
    await slack.fake.push_event(slack.dm("show me"))
    await slack.fake.wait_for(lambda: any("Done." in t for t in texts(slack.fake)))
    await slack.idle(slack.address())
    parts = texts(slack.fake)
    assert len(parts) >= 3  # 40,000 characters, near 70,000 once escaped
    for part in parts:
        assert len(part) <= SLACK_TEXT_LIMIT
        assert not BROKEN_ESCAPE.search(part), part[-20:]
        fences = [ln for ln in part.split("\n") if ln.startswith("```")]
        assert len(fences) % 2 == 0, "a part leaves its code fence open"
    codes = [part.split("```\n", 1)[1].rsplit("\n```", 1)[0] for part in parts if "```" in part]
    for code in codes:  # no character torn from what joins or modifies it
        assert code[0] not in "\u200d\u0301\U0001f3fd" and not code.endswith("\u200d")
    # Nothing lost or doubled: the code rejoins into the whole line, escaped.
    assert "".join(codes) == escape_mrkdwn(line)


@pytest.mark.parametrize("which", ["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"])
async def test_a_revoked_token_at_start_stops_the_channel_with_the_reason(
    home: Home, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    from atlas.channels.manager import start_channels, stop_channels
    from atlas.dispatch import Dispatcher
    from atlas.providers.scripted import ScriptedModel
    from atlas.runtime import Runtime
    from atlas.tools.registry import ToolRegistry
    from tests.fakes.slack_server import FakeSlack
    from tests.integration.test_slack import slack_table

    fake = FakeSlack()
    await fake.start()
    bot_toml = home.root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + slack_table(fake.api_url))
    monkeypatch.setenv("SLACK_BOT_TOKEN", fake.bot_token)
    monkeypatch.setenv("SLACK_APP_TOKEN", fake.app_token)
    monkeypatch.setenv(which, "xoxb-revoked")  # the fake answers invalid_auth, as Slack does
    home = Home(home.root)
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    running = await start_channels(home, dispatcher, first_delay=0.01, max_delay=0.02, wait=10)
    try:
        health = running.health["slack:atlas"].current
        assert health.state == "stopped", health
        assert "invalid_auth" in health.reason and which in health.reason
        calls = len(fake.calls)
        await asyncio.sleep(0.3)  # fifteen retries' worth of the delays above
        assert len(fake.calls) == calls, "a dead token is not tried again"
        assert running.supervisors["slack:atlas"].done()
    finally:
        await stop_channels(running)
        await dispatcher.shutdown()
        await runtime.close()
        await fake.close()


async def test_while_the_store_cannot_write_socket_mode_leaves_the_event_unacknowledged(
    slack: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.unit.test_lane_faults import refuse_writes

    event = slack.dm("keep this for me")
    await refuse_writes(slack.runtime, slack.home, refuse=True)
    with caplog.at_level(logging.WARNING):
        held = await slack.fake.push_event(event, event_id="EvHELD")
        await slack.fake.wait_for(lambda: bool(slack.channel.health.holding))
        again = await slack.fake.push_event(event, event_id="EvHELD", retry_attempt=1)
        await asyncio.sleep(0.3)  # an ack would have come by now (they take milliseconds)
    assert held not in slack.fake.acks and again not in slack.fake.acks
    health = slack.channel.health.current
    assert health.state == "reconnecting" and "the store cannot write" in health.reason
    said = [r for r in caplog.records if "held unacknowledged" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None  # once, one line, for both events
    assert "Traceback" not in caplog.text

    await refuse_writes(slack.runtime, slack.home, refuse=False)
    slack.model.add(Reply("kept it"))
    retried = await slack.fake.push_event(event, event_id="EvHELD", retry_attempt=2)
    await slack.fake.wait_ack(retried)
    late = await slack.fake.push_event(event, event_id="EvHELD", retry_attempt=3)
    await slack.fake.wait_ack(late)  # known now: acknowledged, not taken again
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["kept it"]  # answered once
    store = await slack.runtime.store(slack.home.bot("atlas"))
    rows = await store.db.quick(
        lambda db: list(db.query("SELECT content FROM messages WHERE role = 'user'"))
    )
    assert [r["content"] for r in rows] == ["keep this for me"]  # stored once
    assert slack.channel.health.current.state == "up" and not slack.channel.health.holding


async def test_while_the_store_cannot_write_the_events_api_answers_5xx(
    over_http: Harness,
) -> None:
    from tests.unit.test_lane_faults import refuse_writes

    body = json.dumps(
        {
            "type": "event_callback",
            "team_id": "T0001",
            "api_app_id": "A0001",
            "event_id": "EvHTTPHELD",
            "event": over_http.dm("keep this too"),
        }
    )
    url = over_http.events_url  # type: ignore[attr-defined]
    await refuse_writes(over_http.runtime, over_http.home, refuse=True)
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=signed(body)) as response:
            assert response.status >= 500  # Slack sends it again
        assert "the store cannot write" in over_http.channel.health.current.reason
        await refuse_writes(over_http.runtime, over_http.home, refuse=False)
        over_http.model.add(Reply("kept over http"))
        retry = {**signed(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_error"}
        async with session.post(url, data=body, headers=retry) as response:
            assert response.status == 200
    await over_http.idle(over_http.address())
    assert texts(over_http.fake) == ["kept over http"]
    assert over_http.channel.health.current.state == "up"


def click_first(question: Posted, user: str = "UALICE") -> dict[str, Any]:
    """A click on the question's first button, as Slack sends it."""
    button = question.blocks[1]["elements"][0]  # type: ignore[index]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0001"},
        "api_app_id": "A0001",
        "token": "verification-token",
        "team": {"id": "T0001", "domain": "fake"},
        "container": {"type": "message", "message_ts": question.ts, "channel_id": question.channel},
        "channel": {"id": question.channel, "name": "directmessage"},
        "message": {"ts": question.ts, "text": question.text},
        "trigger_id": "trigger",
        "actions": [
            {
                "type": "button",
                "action_id": button["action_id"],
                "block_id": question.blocks[1]["block_id"],  # type: ignore[index]
                "value": button["value"],
                "action_ts": "1700000001.0",
            }
        ],
    }


async def test_a_long_approval_is_shown_whole_in_a_file_and_folded_with_its_length(
    slack: Harness,
) -> None:
    target = "rm " + " ".join(f"/srv/data/reports/file-{n:03d}.csv" for n in range(100))
    assert len(target) > 3000
    slack.model.add(Reply(calls=[("launch", {"target": target})]), Reply("Launched."))
    await slack.fake.push_event(slack.dm("launch it"))
    await slack.fake.wait_for(lambda: any(p.blocks for p in slack.fake.posted))
    question = next(p for p in slack.fake.posted if p.blocks)
    whole = f"Launch {target}?"
    assert [s.data.decode() for s in slack.fake.shared] == [whole]  # every file, in the file
    assert slack.fake.shared[0].name.endswith(".txt") and slack.fake.shared[0].channel == DM
    shown = question.blocks[0]["text"]["text"]  # type: ignore[index]
    assert f"{len(whole):,} characters" in shown and slack.fake.shared[0].name in shown
    assert "file-000.csv" in shown and "file-099.csv" in shown  # its start and its end
    await slack.fake.push_interactive(click_first(question))
    await slack.idle(slack.address())
    assert texts(slack.fake)[-1] == "Launched."
    assert slack.model.requests[1].messages[-1].content == f"launched {target}"
    assert question.edits, "the answered question was closed (within Slack's limits)"


async def test_the_gate_asks_with_the_whole_command(home_path: Path) -> None:
    from atlas.store.home_db import HomeStore
    from atlas.trust.gate import ALLOW_ONCE, Allow, settle
    from atlas.trust.policy import RuleGate
    from tests.helpers import run_context
    from tests.unit.test_gate import REGISTRY, call, trust_home

    home = trust_home(home_path)
    audit = HomeStore(home_path / "atlas.db")
    try:
        run = run_context(home)
        asked: list[str] = []

        async def ask(question: str, choices: list[str]) -> str | None:
            asked.append(question)
            return ALLOW_ONCE

        run.ask = ask
        body = " ".join(f"item-{n:03d}" for n in range(400))  # 3,599 characters
        command = f'gh pr create --title "cleanup" --body "{body}"'
        decision = await settle(
            RuleGate(home, None, audit), call("run_command", command=command),
            REGISTRY.get("run_command"), run,
        )  # fmt: skip
        assert isinstance(decision, Allow)
        assert command in asked[0], "the question cut the command short"
    finally:
        await audit.close()


async def test_a_long_approval_on_telegram_goes_whole_as_a_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram's approval message was cut at 3,500 characters: the same check there."""
    from atlas.providers.base import ToolCall
    from atlas.tools.registry import RunContext, Tool
    from atlas.trust.gate import ALLOW_ONCE, Allow, Ask, BaseGate, Decision
    from tests.integration.test_telegram import OWNER, _harness

    class AskWithTheText(BaseGate):
        ask_timeout = 5.0

        async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
            if call.name == "shout":
                return Ask(f"Shout {json.loads(call.arguments)['text']}?", rule="test")
            return Allow("test")

    text = " ".join(f"/srv/data/reports/file-{n:03d}.csv" for n in range(150))  # 4,949
    async with _harness(tmp_path, monkeypatch, gate=AskWithTheText()) as tg:
        tg.model.add(Reply(calls=[("shout", {"text": text})]), Reply("shouted"))
        await tg.fake.push(tg.fake.message("shout it", user_id=OWNER))
        await tg.fake.wait_for(lambda: any(m["text"] for m in tg.fake.messages.values()))
        [document] = tg.fake.calls_to("sendDocument")
        assert document["document"]["data"].decode() == f"Shout {text}?"
        question_id, question = next((k, m) for k, m in tg.fake.messages.items() if m["text"])
        shown = question["text"]
        assert len(shown) <= 4096 and f"{len(text) + 7:,} characters" in shown
        assert document["document"]["filename"] in shown
        assert "file-000.csv" in shown and "file-149.csv" in shown  # its start and its end
        buttons = question["params"]["reply_markup"]["inline_keyboard"]
        allow = next(row[0]["callback_data"] for row in buttons if row[0]["text"] == ALLOW_ONCE)
        await tg.fake.push(tg.fake.tap(question_id, allow, user_id=OWNER))
        await tg.fake.wait_for(lambda: "shouted" in tg.fake.sent_texts(OWNER))
