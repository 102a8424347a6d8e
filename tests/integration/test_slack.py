"""The Slack channel: real slack-bolt and slack_sdk against a fake Slack (Web API + Socket Mode)
on 127.0.0.1, with the real Runtime and Dispatcher and a scripted model."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from atlas.channels.access import approve_pairing, list_pairings
from atlas.channels.base import Address
from atlas.channels.slack.channel import SlackChannel, create_channel
from atlas.channels.slack.format import SLACK_TEXT_LIMIT, markdown_to_mrkdwn
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import RunContext, Tool, ToolRegistry, tool
from atlas.trust.gate import ALLOW_ONCE, Allow, Ask, BaseGate, Decision
from tests.fakes.slack_server import BOT_USER_ID, FakeSlack

ALICE = "UALICE"
STRANGER = "USTRANGER"
DM = "D0001"
GENERAL = "C0001"


@tool(read_only=True)
async def lookup(run: RunContext, word: str) -> str:
    """Look a word up."""
    return f"{word} means a test"


@tool()
async def launch(run: RunContext, target: str) -> str:
    """Launch something risky."""
    return f"launched {target}"


class AskForLaunch(BaseGate):
    """Asks a person before `launch`; allows everything else."""

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        if call.name == "launch":
            return Ask(f"Launch {json.loads(call.arguments)['target']}?", rule="launch")
        return Allow()


@dataclass
class Harness:
    fake: FakeSlack
    model: ScriptedModel
    runtime: Runtime
    dispatcher: Dispatcher
    channel: SlackChannel
    home: Home

    def dm(self, text: str, *, user: str = ALICE, **extra: Any) -> dict[str, Any]:
        ts = self.fake.next_ts()
        return {
            "type": "message",
            "channel": DM,
            "channel_type": "im",
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "client_msg_id": str(uuid.uuid4()),
            **extra,
        }

    def in_channel(self, text: str, *, kind: str = "message", **extra: Any) -> dict[str, Any]:
        ts = self.fake.next_ts()
        event = {
            "type": kind,
            "channel": GENERAL,
            "user": ALICE,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "client_msg_id": str(uuid.uuid4()),
            **extra,
        }
        if kind == "message":
            event["channel_type"] = "channel"
        return event

    async def idle(self, address: Address) -> None:
        await self.fake.wait_for(lambda: address in self.dispatcher._lanes)
        await asyncio.wait_for(self.dispatcher.wait_idle(address), 5)

    def address(self, chat: str = DM, thread: str = "") -> Address:
        return Address("atlas", self.channel.name, chat, thread=thread)


def slack_table(api_url: str, extra: str = "") -> str:
    return f"""
[channels.slack]
allowed_users = ["{ALICE}"]
api_base = "{api_url}"
{extra}
"""


async def make_harness(
    home: Home, monkeypatch: pytest.MonkeyPatch, extra: str = "", tools: list[Tool] | None = None
) -> Harness:
    fake = FakeSlack()
    await fake.start()
    bot_toml = home.root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + slack_table(fake.api_url, extra))
    monkeypatch.setenv("SLACK_BOT_TOKEN", fake.bot_token)
    monkeypatch.setenv("SLACK_APP_TOKEN", fake.app_token)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-secret")
    home = Home(home.root)
    model = ScriptedModel()
    runtime = Runtime(
        home,
        model=model,
        gate=AskForLaunch(),
        registry=ToolRegistry([lookup, launch, *(tools or [])]),
    )
    dispatcher = Dispatcher(runtime, {})
    channel = create_channel(home.bot("atlas"), dispatcher)
    channel._retry_base_delay = 0.01  # backoff without Retry-After: keep tests fast
    dispatcher.channels[channel.name] = channel
    await channel.start()
    return Harness(fake, model, runtime, dispatcher, channel, home)


async def close_harness(h: Harness) -> None:
    await h.channel.stop()
    await h.dispatcher.shutdown()
    await h.runtime.close()
    await h.fake.close()


@pytest.fixture
async def slack(home: Home, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    h = await make_harness(home, monkeypatch)
    await h.fake.wait_connected()
    yield h
    await close_harness(h)


def texts(fake: FakeSlack) -> list[str]:
    return [p.text for p in fake.posted]


# --- tests ---------------------------------------------------------------------------------


async def test_dm_round_trip_with_a_tool_call(slack: Harness) -> None:
    slack.model.add(Reply(calls=[("lookup", {"word": "atlas"})]), Reply("It **means** a test."))
    envelope = await slack.fake.push_event(slack.dm("what does atlas mean?"))
    assert (await slack.fake.wait_ack(envelope)) == {"envelope_id": envelope}
    await slack.idle(slack.address())

    assert texts(slack.fake) == ["It *means* a test."]
    reply = slack.fake.posted[0]
    assert reply.channel == DM and reply.thread_ts is None
    tool_result = slack.model.requests[1].messages[-1]
    assert tool_result.role == "tool" and tool_result.content == "atlas means a test"
    assert slack.model.requests[0].messages[-1].content == "what does atlas mean?"
    # The typing mark went on the user's message and came off with the reply.
    assert [c["name"] for c in slack.fake.calls_of("reactions.add")] == ["eyes"]
    # (both are background work: the removal may land just after the reply)
    await slack.fake.wait_for(lambda: len(slack.fake.calls_of("reactions.remove")) == 1)
    # Who the bot is was learnt once, at start; no auth.test per event.
    assert len(slack.fake.calls_of("auth.test")) == 1
    slack.model.assert_complete()


async def test_web_api_calls_reuse_the_channels_connections(slack: Harness) -> None:
    slack.model.add(Reply("one"), Reply("two"))
    for count, text in enumerate(("first", "second"), 1):
        await slack.fake.push_event(slack.dm(text))
        await slack.fake.wait_for(lambda n=count: len(texts(slack.fake)) == n)
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["one", "two"]
    # auth.test, the Socket Mode link, then per turn: reactions.add, chat.postMessage and
    # reactions.remove. slack_sdk opens a new session (a new connection, and against Slack a
    # new TLS handshake) per call unless it is handed one: the channel hands it one.
    assert len(slack.fake.calls) >= 8
    assert len(slack.fake.web_api_peers) <= 3


async def test_channel_mention_is_answered_in_its_thread_which_stays_one_conversation(
    slack: Harness,
) -> None:
    slack.model.add(Reply("first answer"), Reply("second answer"))
    await slack.fake.push_event(slack.in_channel("people talking among themselves"))
    mention = slack.in_channel(f"<@{BOT_USER_ID}> hello there", kind="app_mention")
    # Slack sends a mention twice: as app_mention and as a message; one answer only.
    twin = {**mention, "type": "message", "channel_type": "channel"}
    await slack.fake.push_event(mention)
    await slack.fake.push_event(twin)
    root = mention["ts"]
    await slack.idle(slack.address(GENERAL, root))
    assert texts(slack.fake) == ["first answer"]
    assert slack.fake.posted[0].thread_ts == root

    # A reply in that thread, without a mention, continues the same conversation.
    await slack.fake.push_event(slack.in_channel("and more?", thread_ts=root))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 2)
    await slack.idle(slack.address(GENERAL, root))
    assert slack.fake.posted[1].thread_ts == root
    history = [m.content for m in slack.model.requests[1].messages if m.role == "user"]
    assert history == ["hello there", "and more?"]
    slack.model.assert_complete()


async def test_a_file_lands_in_the_inbox_and_is_named_in_the_turn(slack: Harness) -> None:
    info = slack.fake.add_file("notes v1.txt", b"remember the milk")
    slack.model.add(Reply("got it"))
    await slack.fake.push_event(slack.dm("see attached", subtype="file_share", files=[info]))
    await slack.idle(slack.address())
    saved = slack.home.bot("atlas").workspace / "inbox" / "notes_v1.txt"
    assert saved.read_bytes() == b"remember the milk"
    assert (
        slack.model.requests[0].messages[-1].content == "see attached\n[file: inbox/notes_v1.txt]"
    )
    assert texts(slack.fake) == ["got it"]


async def test_a_file_over_the_limit_gets_a_clear_reply_and_no_turn(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = await make_harness(home, monkeypatch, extra="inbox_max_mb = 0.001")
    try:
        info = h.fake.add_file("big.bin", b"x" * 5000, "application/octet-stream")
        await h.fake.push_event(h.dm("", subtype="file_share", files=[info]))
        await h.fake.wait_for(lambda: len(h.fake.posted) == 1)
        assert "big.bin" in h.fake.posted[0].text and "MB" in h.fake.posted[0].text
        assert h.model.requests == []
        assert not h.fake.calls_of("download")
    finally:
        await close_harness(h)


async def test_a_long_reply_is_split_with_its_code_fence_carried(slack: Harness) -> None:
    code = "\n".join(f"line_{n} = {n} * 2  # a fairly long line of code" for n in range(1200))
    long_text = "Here is the code:\n\n```python\n" + code + "\n```\n\nDone."
    slack.model.add(Reply(long_text))
    await slack.fake.push_event(slack.dm("show me"))
    await slack.idle(slack.address())
    parts = texts(slack.fake)
    assert len(parts) == 2
    assert all(len(part) <= SLACK_TEXT_LIMIT for part in parts)
    assert parts[0].endswith("```") and parts[1].startswith("```\n")
    assert parts[1].rstrip().endswith("Done.")
    # Nothing lost or doubled: the parts rejoin into the whole rendered reply.
    whole = markdown_to_mrkdwn(long_text)
    rejoined = parts[0].removesuffix("\n```") + "\n" + parts[1].removeprefix("```\n")
    assert rejoined == whole


async def test_an_approval_is_clicked_and_only_an_allowed_click_counts(slack: Harness) -> None:
    slack.model.add(Reply(calls=[("launch", {"target": "rocket"})]), Reply("Launched."))
    await slack.fake.push_event(slack.dm("launch the rocket"))
    await slack.fake.wait_for(lambda: any(p.blocks for p in slack.fake.posted))
    question = next(p for p in slack.fake.posted if p.blocks)
    buttons = question.blocks[1]["elements"]
    assert [b["text"]["text"] for b in buttons] == [
        "allow once",
        "allow for this conversation",
        "deny",
    ]
    assert len({b["action_id"] for b in buttons}) == 3

    def click(user: str, index: int) -> dict[str, Any]:
        button = buttons[index]
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": "T0001"},
            "api_app_id": "A0001",
            "token": "verification-token",
            "team": {"id": "T0001", "domain": "fake"},
            "container": {"type": "message", "message_ts": question.ts, "channel_id": DM},
            "channel": {"id": DM, "name": "directmessage"},
            "message": {"ts": question.ts, "text": question.text},
            "trigger_id": "trigger",
            "actions": [
                {
                    "type": "button",
                    "action_id": button["action_id"],
                    "block_id": question.blocks[1]["block_id"],
                    "value": button["value"],
                    "action_ts": "1700000001.0",
                }
            ],
        }

    acked = await slack.fake.wait_ack(await slack.fake.push_interactive(click(STRANGER, 0)))
    assert acked["envelope_id"]
    await slack.fake.wait_for(lambda: len(slack.fake.ephemeral) == 1)
    assert slack.fake.ephemeral[0]["user"] == STRANGER
    assert not question.edits and len(slack.model.requests) == 1  # still waiting

    await slack.fake.push_interactive(click(ALICE, 0))
    await slack.idle(slack.address())
    assert texts(slack.fake)[-1] == "Launched."
    assert slack.model.requests[1].messages[-1].content == "launched rocket"
    edit = question.edits[-1]
    shown = json.dumps(edit["blocks"])
    assert "allow once" in shown and f"<@{ALICE}>" in shown
    assert all(block["type"] != "actions" for block in edit["blocks"])  # buttons gone


async def test_ask_returns_each_answer_to_its_own_request(slack: Harness) -> None:
    address = slack.address()
    first = asyncio.create_task(slack.channel.ask(address, "Colour?", ["red", "blue"]))
    second = asyncio.create_task(slack.channel.ask(address, "Size?", ["S", "M", "L"]))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 2)
    by_text = {p.text: p for p in slack.fake.posted}
    for text, index in (("Size?", 2), ("Colour?", 1)):
        button = by_text[text].blocks[1]["elements"][index]
        await slack.fake.push_interactive(
            {
                "type": "block_actions",
                "user": {"id": ALICE},
                "team": {"id": "T0001"},
                "container": {"message_ts": by_text[text].ts, "channel_id": DM},
                "channel": {"id": DM},
                "actions": [{"action_id": button["action_id"], "value": button["value"]}],
            }
        )
    assert await asyncio.wait_for(first, 5) == "blue"
    assert await asyncio.wait_for(second, 5) == "L"


async def test_an_unanswered_question_is_closed_when_its_wait_ends(slack: Harness) -> None:
    waiting = asyncio.create_task(slack.channel.ask(slack.address(), "Proceed?", [ALLOW_ONCE]))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await slack.fake.wait_for(lambda: bool(slack.fake.posted[0].edits))
    assert "No answer" in slack.fake.posted[0].edits[-1]["text"]


async def test_a_stranger_gets_one_pairing_code_and_no_model_call(slack: Harness) -> None:
    await slack.fake.push_event(slack.dm("hi, who are you?", user=STRANGER))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    code = re.search(r"\b[A-Z2-9]{8}\b", slack.fake.posted[0].text)
    assert code, slack.fake.posted[0].text
    await slack.fake.push_event(slack.dm("hello??", user=STRANGER))
    await asyncio.sleep(0.2)
    assert len(slack.fake.posted) == 1  # one reply, nothing more
    assert slack.model.requests == []
    [pairing] = await list_pairings(slack.runtime.audit)
    assert (pairing.user_id, pairing.platform, pairing.code) == (STRANGER, "slack", code.group())

    # In a channel the code is shown to the stranger alone.
    await slack.fake.push_event(
        {**slack.in_channel(f"<@{BOT_USER_ID}> hi", kind="app_mention"), "user": "UOTHER"}
    )
    await slack.fake.wait_for(lambda: len(slack.fake.ephemeral) == 1)
    assert slack.fake.ephemeral[0]["user"] == "UOTHER"
    assert re.search(r"\b[A-Z2-9]{8}\b", slack.fake.ephemeral[0]["text"])
    assert len(slack.fake.posted) == 1 and slack.model.requests == []

    await approve_pairing(slack.runtime.audit, code.group())
    slack.model.add(Reply("welcome"))
    await slack.fake.push_event(slack.dm("now?", user=STRANGER))
    await slack.idle(slack.address())
    assert texts(slack.fake)[-1] == "welcome"


async def test_a_redelivered_event_is_dropped(slack: Harness) -> None:
    slack.model.add(Reply("only once"))
    event = slack.dm("hello")
    await slack.fake.push_event(event, event_id="Ev-1")
    await slack.fake.push_event(event, event_id="Ev-1", retry_attempt=1)
    await slack.idle(slack.address())
    await asyncio.sleep(0.1)
    assert texts(slack.fake) == ["only once"]
    slack.model.assert_complete()


async def test_a_redelivery_after_a_restart_is_dropped_by_the_store(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = await make_harness(home, monkeypatch)
    try:
        h.model.add(Reply("only once"))
        event = h.dm("hello")
        await h.fake.push_event(event, event_id="Ev-9")
        await h.idle(h.address())
        # A new channel (as after a restart) has no memory of the event; the store does.
        await h.channel.stop()
        h.channel = create_channel(h.home.bot("atlas"), h.dispatcher)
        h.dispatcher.channels[h.channel.name] = h.channel
        await h.channel.start()
        await h.fake.push_event(event, event_id="Ev-9", retry_attempt=1)
        await asyncio.sleep(0.3)
        assert texts(h.fake) == ["only once"]
        h.model.assert_complete()
    finally:
        await close_harness(h)


async def test_a_redelivery_after_a_restart_and_new_is_dropped_by_the_store(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slack retries an event the restarted channel never saw, after the person started a new
    conversation with `!new`: the retry would land in that new conversation, so the store
    knows an event across the bot's conversations, not only within one."""
    h = await make_harness(home, monkeypatch)
    try:
        h.model.add(Reply("only once"))
        event = h.dm("hello")
        await h.fake.push_event(event, event_id="Ev-11")
        await h.idle(h.address())
        await h.channel.stop()
        h.channel = create_channel(h.home.bot("atlas"), h.dispatcher)
        h.dispatcher.channels[h.channel.name] = h.channel
        await h.channel.start()
        await h.fake.push_event(h.dm("!new"))
        await h.fake.wait_for(lambda: len(h.fake.posted) == 2)
        await h.fake.push_event(event, event_id="Ev-11", retry_attempt=2)
        await asyncio.sleep(0.3)
        assert texts(h.fake)[0] == "only once" and texts(h.fake).count("only once") == 1
        assert len(h.fake.posted) == 2  # the answer and !new's line: nothing more
        h.model.assert_complete()
    finally:
        await close_harness(h)


async def test_a_429_and_a_dropped_connection_still_deliver_exactly_once(slack: Harness) -> None:
    slack.model.add(Reply("delivered"))
    slack.fake.fail("chat.postMessage", "drop_before")  # lost before Slack saw it
    slack.fake.fail("chat.postMessage", "429", retry_after=1)
    slack.fake.fail("chat.postMessage", "drop_after")  # posted, but the answer is lost
    started = time.monotonic()
    await slack.fake.push_event(slack.dm("hi"))
    await slack.idle(slack.address())
    assert time.monotonic() - started >= 1.0  # Retry-After was honoured
    assert texts(slack.fake) == ["delivered"]
    methods = [c.method for c in slack.fake.calls if "chat" in c.method or "history" in c.method]
    assert methods == [
        "chat.postMessage (dropped)",
        "conversations.history",  # did the dropped post land? no: post it
        "chat.postMessage (429)",
        "chat.postMessage",  # posted, answer lost
        "conversations.history",  # found there: not posted again
    ]


async def test_a_5xx_is_retried(slack: Harness) -> None:
    slack.model.add(Reply("after the outage"))
    slack.fake.fail("chat.postMessage", "500", times=2)
    await slack.fake.push_event(slack.dm("hi"))
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["after the outage"]


async def test_a_dropped_socket_reconnects_and_events_keep_flowing(slack: Harness) -> None:
    await slack.fake.drop_socket()
    await slack.fake.wait_connected()
    assert slack.fake.connections == 2
    assert len(slack.fake.calls_of("apps.connections.open")) == 2
    slack.model.add(Reply("still here"))
    await slack.fake.push_event(slack.dm("are you there?"))
    await slack.idle(slack.address())
    assert texts(slack.fake) == ["still here"]


async def test_an_undeliverable_reply_is_kept_and_sent_ahead_of_the_next_one(
    slack: Harness,
) -> None:
    address = slack.address()
    slack.dispatcher.outbox.retry_first = 3600  # only the next message tries it again
    slack.fake.fail("chat.postMessage", "500", times=5)
    problem = await slack.dispatcher.deliver(address, "the lost reply", kind="answer")
    assert problem is not None and "failed after 5 attempts" in problem
    assert await slack.dispatcher.deliver(address, "next", kind="answer") is None
    late, posted = texts(slack.fake)
    assert "could not be delivered" in late and late.endswith("the lost reply")
    assert posted == "next"


async def test_the_channel_keeps_nothing_it_could_not_post(slack: Harness) -> None:
    """A thin adapter: the failure is raised, classified, for the outbox to keep; the
    channel's next send posts only what it is given."""
    from atlas.outbox.errors import RetryLater

    address = slack.address()
    slack.fake.fail("chat.postMessage", "500", times=5)
    with pytest.raises(RetryLater, match="failed after 5 attempts"):
        await slack.channel.send(address, "the lost reply")
    assert await slack.channel.send(address, "next")  # the ts of the post
    assert texts(slack.fake) == ["next"]


async def test_bang_commands_status_stop_and_new(slack: Harness) -> None:
    slack.model.add(Reply("first"))
    await slack.fake.push_event(slack.dm("remember: blue"))
    await slack.idle(slack.address())

    await slack.fake.push_event(slack.dm("!status"))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 2)
    assert "fake/test-model" in slack.fake.posted[1].text

    await slack.fake.push_event(slack.dm("!stop"))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 3)
    assert "Nothing is running" in slack.fake.posted[2].text

    await slack.fake.push_event(slack.dm("!new"))
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 4)
    slack.model.add(Reply("fresh"))
    await slack.fake.push_event(slack.dm("hello again"))
    await slack.idle(slack.address(f"{DM}#1"))  # the chat key now carries its generation
    assert texts(slack.fake)[-1] == "fresh"
    assert slack.fake.posted[-1].channel == DM
    users = [m.content for m in slack.model.requests[-1].messages if m.role == "user"]
    assert users == ["hello again"]  # the old conversation is out of view
    assert len(slack.model.requests) == 2  # commands never reached the model


async def test_slash_command_is_acknowledged_and_acts(slack: Harness) -> None:
    envelope = await slack.fake.push_slash_command("/status", user=ALICE, channel=DM)
    await slack.fake.wait_ack(envelope)
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    assert "fake/test-model" in slack.fake.posted[0].text
    refused = await slack.fake.push_slash_command("/new", user=STRANGER, channel=DM)
    ack = await slack.fake.wait_ack(refused)
    assert "approved" in json.dumps(ack)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_http_events_api_checks_the_signature(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    h = await make_harness(home, monkeypatch, extra=f'mode = "http"\nhttp_port = {port}')
    try:
        h.model.add(Reply("over http"))
        body = json.dumps(
            {
                "type": "event_callback",
                "team_id": "T0001",
                "api_app_id": "A0001",
                "event_id": "EvHTTP",
                "event": h.dm("hi over http"),
            }
        )
        url = f"http://127.0.0.1:{port}/slack/events"
        stamp = str(int(time.time()))
        digest = hmac.new(b"signing-secret", f"v0:{stamp}:{body}".encode(), hashlib.sha256)
        good = {
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": "v0=" + digest.hexdigest(),
            "Content-Type": "application/json",
        }
        forged = {**good, "X-Slack-Signature": "v0=" + "0" * 64}
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=body, headers=forged) as response:
                assert response.status == 401
            async with session.post(url, data=body, headers=good) as response:
                assert response.status == 200
        await h.idle(h.address())
        assert texts(h.fake) == ["over http"]
        assert h.fake.connections == 0  # no Socket Mode in HTTP mode
    finally:
        await close_harness(h)


async def test_a_missing_token_names_the_variable(home: Home) -> None:
    bot_toml = home.root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + slack_table("http://127.0.0.1:9/api/"))
    home = Home(home.root)
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    try:
        with pytest.raises(Exception, match="SLACK_BOT_TOKEN"):
            create_channel(home.bot("atlas"), Dispatcher(runtime, {}))
    finally:
        await runtime.close()


def test_markdown_becomes_mrkdwn() -> None:
    rendered = markdown_to_mrkdwn(
        "# Plan\n**bold**, *it*, ~~old~~, [docs](https://x.test/a) and 1 < 2 & <@U1>\n"
        "- item\n```python\nif a < b: **no**\n```"
    )
    assert rendered.split("\n") == [
        "*Plan*",
        "*bold*, _it_, ~old~, <https://x.test/a|docs> and 1 &lt; 2 &amp; <@U1>",
        "• item",
        "```",
        "if a &lt; b: **no**",
        "```",
    ]


async def test_an_approval_answered_on_the_dashboard_shows_there_in_slack(slack: Harness) -> None:
    from atlas.pending_asks import PendingAsks

    asks = PendingAsks()
    address = slack.address()
    waiting = asyncio.create_task(
        asks.approval(
            address,
            1,
            "Proceed?",
            [ALLOW_ONCE, "deny"],
            lambda: slack.channel.ask(address, "Proceed?", [ALLOW_ONCE, "deny"]),
        )
    )
    await slack.fake.wait_for(lambda: len(slack.fake.posted) == 1)
    assert asks.answer_approval(asks.open()[0].id, ALLOW_ONCE)
    assert await asyncio.wait_for(waiting, 5) == ALLOW_ONCE
    await slack.fake.wait_for(lambda: bool(slack.fake.posted[0].edits))
    assert f"{ALLOW_ONCE} (on the dashboard)" in slack.fake.posted[0].edits[-1]["text"]
