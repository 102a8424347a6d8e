"""The Telegram channel: real aiogram against the fake Bot API on 127.0.0.1, with the real
Dispatcher and tool loop (a scripted model)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from atlas.channels.access import approve_pairing, list_pairings
from atlas.channels.base import Address
from atlas.channels.chat_common import NEW_CONVERSATION
from atlas.channels.manager import RunningChannels, start_channels, stop_channels
from atlas.channels.telegram import sending as telegram_sending
from atlas.channels.telegram.channel import TelegramChannel
from atlas.channels.telegram.delivery import Chunk, send_chunk
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.base import ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.attach import ATTACH_TOOLS
from atlas.tools.registry import RunContext, Tool, ToolRegistry, tool
from atlas.trust.gate import ALLOW_ONCE, Allow, Ask, BaseGate, Decision, OpenGate
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.helpers import make_home

OWNER = 1  # the allowed user
TOOL_RUNS: list[str] = []


@tool()
async def shout(run: RunContext, text: str) -> str:
    """Say the text loudly."""
    TOOL_RUNS.append(text)
    # Work takes a moment, as real tools' does: "typing…" is sent while a turn waits on
    # something, and with a scripted model and the store on the loop nothing else waits.
    await asyncio.sleep(0.05)
    return text.upper()


class AskForShout(BaseGate):
    """Asks a person before `shout` runs; allows everything else."""

    ask_timeout = 5.0

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        if call.name == "shout":
            return Ask("Let the bot shout?", rule="test")
        return Allow("test")


@dataclass
class Harness:
    fake: FakeTelegram
    home: Home
    model: ScriptedModel
    runtime: Runtime
    dispatcher: Dispatcher
    channels: RunningChannels

    @property
    def channel(self) -> TelegramChannel:
        return self.channels["telegram:atlas"]  # type: ignore[return-value]

    async def replies(self, chat_id: int, count: int) -> list[str]:
        """Wait until the bot sent `count` messages to the chat; those messages."""
        await self.fake.wait_for(lambda: len(self.fake.sent_texts(chat_id)) >= count)
        return self.fake.sent_texts(chat_id)


BOT_TOML = """
[channels.telegram]
token_env = "ATLAS_TEST_TELEGRAM_TOKEN"
api_base = "{base}"
allowed_users = [{owner}]
poll_timeout = 5
{extra}
"""


@contextlib.asynccontextmanager
async def _harness(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    extra: str = "",
    gate: BaseGate | None = None,
    tools: list[Tool] | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Harness]:
    fake = FakeTelegram()
    base = await fake.start()
    monkeypatch.setenv("ATLAS_TEST_TELEGRAM_TOKEN", TOKEN)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "home"
    make_home(root)
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + BOT_TOML.format(base=base, owner=OWNER, extra=extra))
    home = Home(root)
    model = ScriptedModel()
    registry = ToolRegistry(tools or [shout])
    runtime = Runtime(home, model=model, gate=gate or OpenGate(), registry=registry)
    dispatcher = Dispatcher(runtime, {})
    channels = await start_channels(home, dispatcher, wait=5)
    TOOL_RUNS.clear()
    try:
        yield Harness(fake, home, model, runtime, dispatcher, channels)
    finally:
        await dispatcher.shutdown()
        await stop_channels(channels)
        await runtime.close()
        await fake.stop()


@pytest.fixture
async def tg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    async with _harness(tmp_path, monkeypatch) as harness:
        yield harness


async def test_dm_round_trip_with_a_tool_call(tg: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telegram_sending, "TYPING_AFTER", 0.01)  # the tool takes 0.05 s
    tg.model.add(Reply(calls=[("shout", {"text": "hi"})]), Reply("I said **HI**."))
    assert "telegram:atlas" in tg.dispatcher.channels
    await tg.fake.push(tg.fake.message("please shout hi", user_id=OWNER))
    replies = await tg.replies(OWNER, 1)
    assert replies == ["I said <b>HI</b>."]
    assert TOOL_RUNS == ["hi"]
    sent = tg.fake.calls_to("sendMessage")[0]
    assert sent["parse_mode"] == "HTML"
    assert tg.fake.calls_to("sendChatAction"), "a typing indicator was shown during the turn"
    assert tg.model.requests[0].messages[-1].content == "please shout hi"
    tg.model.assert_complete()


async def test_a_quick_reply_shows_no_typing_indicator(tg: Harness) -> None:
    """The Bot API recommends "typing…" only for a reply that takes a noticeable time; a
    reply sooner than TYPING_AFTER costs no request for it."""
    tg.model.add(Reply("At once."))
    await tg.fake.push(tg.fake.message("quick one", user_id=OWNER))
    assert await tg.replies(OWNER, 1) == ["At once."]
    assert telegram_sending.TYPING_AFTER >= 0.5
    assert not tg.fake.calls_to("sendChatAction")


async def test_group_answers_only_when_mentioned_each_person_their_own(tg: Harness) -> None:
    group = -100500
    tg.model.add(Reply("hello group"))
    await tg.fake.push(
        tg.fake.message("chatting among us", user_id=OWNER, chat_id=group, chat_type="supergroup")
    )
    await tg.fake.push(
        tg.fake.mention("what time is it?", user_id=OWNER, chat_id=group, chat_type="supergroup")
    )
    assert await tg.replies(group, 1) == ["hello group"]
    assert tg.model.requests[0].messages[-1].content == "what time is it?"
    store = await tg.runtime.store(tg.home.bot("atlas"))
    conversation = await store.conversation(
        "telegram:atlas", str(group), user=str(OWNER), bot="atlas"
    )
    assert [m.content for m in await store.history(conversation.id)][0] == "what time is it?"
    assert len(tg.model.requests) == 1, "the unaddressed message made no model call"


async def test_forum_topic_is_one_conversation_and_replies_in_it(tg: Harness) -> None:
    group = -100600
    tg.model.add(Reply("in the topic"))
    await tg.fake.push(
        tg.fake.mention(
            "topic question", user_id=OWNER, chat_id=group, chat_type="supergroup", thread_id=77
        )
    )
    assert await tg.replies(group, 1) == ["in the topic"]
    sent = tg.fake.calls_to("sendMessage")[0]
    assert sent["message_thread_id"] == "77"
    store = await tg.runtime.store(tg.home.bot("atlas"))
    conversation = await store.conversation("telegram:atlas", str(group), thread="77", bot="atlas")
    assert [m.content for m in await store.history(conversation.id)][0] == "topic question"


async def test_a_document_lands_in_the_inbox_and_is_named_in_the_turn(tg: Harness) -> None:
    file_id = tg.fake.add_file(b"%PDF-1.4 pretend", "documents/file_7.pdf")
    document = {
        "file_id": file_id,
        "file_unique_id": "u7",
        "file_name": "report.pdf",
        "file_size": 16,
    }
    tg.model.add(Reply("got it"))
    await tg.fake.push(tg.fake.message(user_id=OWNER, caption="summarise this", document=document))
    await tg.replies(OWNER, 1)
    saved = tg.home.bot("atlas").workspace / "inbox" / "report.pdf"
    assert saved.read_bytes() == b"%PDF-1.4 pretend"
    assert tg.model.requests[0].messages[-1].content == "summarise this\n[file: inbox/report.pdf]"


async def test_a_file_over_the_limit_is_refused_with_a_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _harness(tmp_path, monkeypatch, extra="inbox_max_mb = 0.001") as tg:
        file_id = tg.fake.add_file(b"x" * 5000, "documents/big.bin")
        document = {
            "file_id": file_id,
            "file_unique_id": "u8",
            "file_name": "big.bin",
            "file_size": 5000,
        }
        await tg.fake.push(tg.fake.message(user_id=OWNER, document=document))
        [reply] = await tg.replies(OWNER, 1)
        assert "big.bin" in reply and "MB" in reply
        assert not (tg.home.bot("atlas").workspace / "inbox" / "big.bin").exists()
        assert tg.model.requests == []


async def test_a_long_reply_is_split_carrying_the_code_fence(tg: Harness) -> None:
    code = "\n".join(f"line_{i} = {i}  # ünïcode 🙂" for i in range(400))
    tg.model.add(Reply(f"Here is the code:\n\n```python\n{code}\n```\n\nDone."))
    await tg.fake.push(tg.fake.message("code please", user_id=OWNER))
    await tg.fake.wait_for(lambda: any("Done." in t for t in tg.fake.sent_texts(OWNER)))
    texts = tg.fake.sent_texts(OWNER)
    assert len(texts) >= 3
    for text in texts:
        assert len(text.encode("utf-16-le")) // 2 <= 4096
    for text in texts[:-1]:
        assert text.rstrip().endswith("</code></pre>")
    for text in texts[1:]:
        assert text.startswith('<pre><code class="language-python">')
    joined = "".join(texts)
    for i in range(400):
        assert joined.count(f"line_{i} = {i} ") == 1


async def test_an_approval_is_tapped_and_the_message_shows_who(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _harness(tmp_path, monkeypatch, gate=AskForShout()) as tg:
        tg.model.add(Reply(calls=[("shout", {"text": "ok"})]), Reply("shouted"))
        await tg.fake.push(tg.fake.message("shout ok", user_id=OWNER))
        [question] = await tg.replies(OWNER, 1)
        assert "Let the bot shout?" in question
        message_id = next(iter(tg.fake.messages))
        buttons = tg.fake.messages[message_id]["params"]["reply_markup"]["inline_keyboard"]
        allow_data = next(
            row[0]["callback_data"] for row in buttons if row[0]["text"] == ALLOW_ONCE
        )
        # A stranger's tap does not count.
        await tg.fake.push(tg.fake.tap(message_id, allow_data, user_id=666))
        await tg.fake.wait_for(lambda: len(tg.fake.calls_to("answerCallbackQuery")) == 1)
        assert TOOL_RUNS == []
        await tg.fake.push(tg.fake.tap(message_id, allow_data, user_id=OWNER))
        await tg.fake.wait_for(lambda: "shouted" in tg.fake.sent_texts(OWNER))
        assert TOOL_RUNS == ["ok"]
        edited = tg.fake.messages[message_id]["text"]
        assert ALLOW_ONCE in edited and f"user{OWNER}" in edited
        assert "reply_markup" not in tg.fake.messages[message_id]["edited"]


async def test_a_stranger_is_paired_then_approved_then_served(tg: Harness) -> None:
    stranger = 42
    await tg.fake.push(tg.fake.message("hi bot", user_id=stranger, first_name="Bob"))
    [reply] = await tg.replies(stranger, 1)
    [pairing] = await list_pairings(tg.runtime.audit)
    assert pairing.code in reply and len(pairing.code) == 8 and pairing.user_id == "42"
    # More messages get no further reply and no model call.
    second = await tg.fake.push(tg.fake.message("hello??", user_id=stranger))
    await tg.fake.wait_for(lambda: tg.fake.confirmed(second))
    assert tg.fake.sent_texts(stranger) == [reply]
    assert tg.model.requests == []
    await approve_pairing(tg.runtime.audit, pairing.code.lower())
    tg.model.add(Reply("welcome, Bob"))
    await tg.fake.push(tg.fake.message("now?", user_id=stranger))
    assert (await tg.replies(stranger, 2))[1] == "welcome, Bob"


async def test_a_duplicate_update_is_dropped(tg: Harness) -> None:
    tg.model.add(Reply("only once"))
    update_id = await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.replies(OWNER, 1)
    await tg.fake.push_again(update_id)
    tg.model.add(Reply("second"))
    await tg.fake.push(tg.fake.message("again", user_id=OWNER))
    await tg.replies(OWNER, 2)
    assert tg.fake.sent_texts(OWNER) == ["only once", "second"]


async def test_rate_limit_5xx_and_a_proxys_502_page_deliver_each_chunk_once(tg: Harness) -> None:
    # A dropped connection is not among these: a sendMessage it cuts off may have arrived, so
    # it is not sent again (tests/integration/test_telegram_faults.py).
    tg.fake.fail_next("sendMessage", "429", retry_after=1)
    tg.fake.fail_next("sendMessage", "html502")
    tg.fake.fail_next("sendMessage", "500")
    paragraph = "word " * 700
    tg.model.add(Reply(f"{paragraph}\n\nFIRST END\n\n{paragraph}\n\nSECOND END"))
    await tg.fake.push(tg.fake.message("long please", user_id=OWNER))
    await tg.fake.wait_for(
        lambda: any("SECOND END" in t for t in tg.fake.sent_texts(OWNER)), timeout=10
    )
    texts = tg.fake.sent_texts(OWNER)
    assert len(texts) == 2
    assert sum(t.count("FIRST END") for t in texts) == 1
    assert sum(t.count("SECOND END") for t in texts) == 1
    assert not tg.fake.faults, "every injected fault was met"


async def test_markup_rejected_falls_back_to_plain_text(tg: Harness) -> None:
    channel = tg.channel
    # Unbalanced markup on purpose: the fake rejects it as Telegram would.
    chunk = Chunk("<b>broken", "**broken")
    await send_chunk(channel.tg, channel.retrying, OWNER, chunk)  # type: ignore[arg-type]
    assert tg.fake.sent_texts(OWNER) == ["**broken"]
    await channel.send(Address("atlas", "telegram:atlas", str(OWNER)), "plain *fine*")
    assert tg.fake.sent_texts(OWNER)[-1] == "plain <i>fine</i>"


async def test_new_starts_a_fresh_conversation_and_status_reports(tg: Harness) -> None:
    tg.model.add(Reply("first"), Reply("fresh"))
    await tg.fake.push(tg.fake.message("remember 7", user_id=OWNER))
    await tg.replies(OWNER, 1)
    await tg.fake.push(tg.fake.message("/new", user_id=OWNER))
    await tg.replies(OWNER, 2)
    await tg.fake.push(tg.fake.message("what number?", user_id=OWNER))
    await tg.replies(OWNER, 3)
    assert [m.content for m in tg.model.requests[1].messages if m.role == "user"] == [
        "what number?"
    ]
    await tg.fake.push(tg.fake.message(f"/status@{'atlas_test_bot'}", user_id=OWNER))
    status = (await tg.replies(OWNER, 4))[-1]
    assert "fake/test-model" in status and "Pending approvals" in status


async def test_new_while_the_answer_goes_out_stops_nothing(tg: Harness) -> None:
    """/new sent while the answer is in flight (stored, its sendMessage not yet answered) finds
    no turn to stop: the person gets the answer and the note, never a "Stopped." after an
    answer they already have."""
    tg.model.add(Reply("first"))
    answer_in_flight = tg.fake.hold("sendMessage")
    await tg.fake.push(tg.fake.message("remember 7", user_id=OWNER))
    await tg.fake.wait_for(lambda: len(tg.fake.calls_to("sendMessage")) == 1)
    await tg.fake.push(tg.fake.message("/new", user_id=OWNER))
    # /new has been handled once the chat's next generation is stored.
    await tg.fake.wait_for(lambda: tg.channel.generations._known.get((str(OWNER), "", "")) == 1)
    answer_in_flight.set()
    texts = await tg.replies(OWNER, 2)
    await tg.dispatcher.wait_idle(Address("atlas", "telegram:atlas", str(OWNER)))
    assert tg.fake.sent_texts(OWNER) == texts == ["first", NEW_CONVERSATION]


async def test_stop_cancels_the_running_turn(tg: Harness) -> None:
    hold = asyncio.Event()
    tg.model.add(Reply("never", wait_for=hold))
    await tg.fake.push(tg.fake.message("slow one", user_id=OWNER))
    await tg.fake.wait_for(lambda: len(tg.model.requests) == 1)
    await tg.fake.push(tg.fake.message("/stop", user_id=OWNER))
    texts = await tg.replies(OWNER, 1)
    assert "Stopped." in texts
    assert "never" not in texts


@pytest.fixture
async def tg_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    async with _harness(tmp_path, monkeypatch, tools=[shout, *ATTACH_TOOLS]) as harness:
        yield harness


async def test_an_attached_file_goes_out_as_a_document_after_the_text(tg_files: Harness) -> None:
    tg = tg_files
    report = tg.home.bot("atlas").workspace / "report.csv"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_bytes(b"a,b\n1,2\n")
    tg.fake.fail_next("sendDocument", "429", retry_after=1)  # retried, sent once
    tg.model.add(Reply(calls=[("attach_file", {"path": "report.csv"})]), Reply("Here it is."))
    await tg.fake.push(tg.fake.message("the report please", user_id=OWNER))
    await tg.fake.wait_for(lambda: bool(tg.fake.calls_to("sendDocument")))
    [document] = tg.fake.calls_to("sendDocument")
    assert document["document"] == {"filename": "report.csv", "data": b"a,b\n1,2\n"}
    assert document["chat_id"] == str(OWNER)
    in_order = [
        m.get("document", {}).get("filename") or m["text"] for m in tg.fake.messages.values()
    ]
    assert in_order == ["Here it is.", "report.csv"]
    assert not tg.fake.faults
    assert "report.csv will be sent" in str(tg.model.requests[1].messages[-1].content)


async def test_a_file_telegram_refuses_is_named_in_the_reply(tg_files: Harness) -> None:
    tg = tg_files
    chart = tg.home.bot("atlas").workspace / "chart.png"
    chart.parent.mkdir(parents=True, exist_ok=True)
    chart.write_bytes(b"\x89PNG fake")
    tg.fake.fail_next("sendDocument", "400")
    tg.model.add(Reply(calls=[("attach_file", {"path": "chart.png"})]), Reply("The chart."))
    await tg.fake.push(tg.fake.message("chart please", user_id=OWNER))
    texts = await tg.replies(OWNER, 2)
    assert texts[0] == "The chart."
    assert "chart.png" in texts[1] and "chat not found" in texts[1]
    assert not tg.fake.calls_to("sendDocument"), "the refused upload was not recorded as sent"


async def test_a_file_gone_before_sending_is_named_and_the_text_still_goes(tg: Harness) -> None:
    address = Address("atlas", "telegram:atlas", str(OWNER))
    missing = tg.home.bot("atlas").workspace / "vanished.pdf"
    await tg.channel.send(address, "Your summary.", [missing])
    [text] = tg.fake.sent_texts(OWNER)
    assert text.startswith("Your summary.")
    assert "vanished.pdf" in text and "cannot be read" in text
    assert not tg.fake.calls_to("sendDocument")


async def outbox_rows(tg: Harness) -> list[tuple[str, str]]:
    """(kind, state) of every outbox row of the bot (atlas/outbox/rows.py)."""
    store = await tg.runtime.store(tg.home.bot("atlas"))
    return await store.db.quick(
        lambda db: [tuple(r) for r in db.execute("SELECT kind, state FROM outbox ORDER BY id")]
    )


async def test_a_502_outage_keeps_the_answer_and_it_goes_ahead_of_the_next_once(
    tg: Harness,
) -> None:
    address = Address("atlas", "telegram:atlas", str(OWNER))
    tg.dispatcher.outbox.retry_first = 3600  # only the next message tries it again
    tg.model.add(Reply("the first answer"), Reply("the second answer"))
    # nginx's HTML 502 page for every attempt the first answer gets within its send.
    tg.fake.fail_next("sendMessage", "html502", times=5)
    await tg.fake.push(tg.fake.message("one", user_id=OWNER))
    await tg.fake.wait_for(lambda: not tg.fake.faults)
    await tg.dispatcher.wait_idle(address)
    assert tg.fake.sent_texts(OWNER) == []
    assert await outbox_rows(tg) == [("answer", "kept")]
    await tg.fake.push(tg.fake.message("two", user_id=OWNER))
    first, second = await tg.replies(OWNER, 2)
    assert first == (
        "<i>(An earlier reply could not be delivered; here it is:)</i>\n\nthe first answer"
    )
    assert second == "the second answer"
    await tg.dispatcher.wait_idle(address)
    await tg.dispatcher.outbox.drained()
    # Each went once, and a restart would send nothing again.
    assert await outbox_rows(tg) == [("answer", "delivered"), ("answer", "delivered")]
    assert len(tg.fake.sent_texts(OWNER)) == 2


async def test_an_answer_kept_through_an_outage_is_sent_alone_when_it_is_over(
    tg: Harness,
) -> None:
    tg.dispatcher.outbox.retry_first = 0.2
    tg.model.add(Reply("the answer"))
    tg.fake.fail_next("sendMessage", "500", times=5 + 1)  # every attempt, then the first retry
    await tg.fake.push(tg.fake.message("one", user_id=OWNER))
    [alone] = await tg.replies(OWNER, 1)  # nobody wrote again
    assert alone == "<i>(An earlier reply could not be delivered; here it is:)</i>\n\nthe answer"
    # The row is marked once Telegram's answer is back, just after the fake recorded it.
    await tg.dispatcher.outbox.drained()
    assert await outbox_rows(tg) == [("answer", "delivered")]
