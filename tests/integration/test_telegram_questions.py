"""ask_user on Telegram: real aiogram against the fake Bot API on 127.0.0.1; the tool reaches the
channel through run.ask_questions, as the dispatcher will bind it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from atlas.channels.base import Address, AnsweredElsewhere, Question, QuestionOutcome
from atlas.channels.manager import start_channels, stop_channels
from atlas.channels.telegram.channel import TelegramChannel
from atlas.dispatch import Dispatcher
from atlas.home import Home
from atlas.providers.scripted import ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.ask import ask_user
from atlas.tools.registry import ToolRegistry
from atlas.trust.gate import OpenGate
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.helpers import BASE_CONFIG, make_home, run_context

OWNER = 1
STRANGER = 666

BOT_TOML = """
[channels.telegram]
token_env = "ATLAS_TEST_TELEGRAM_TOKEN"
api_base = "{base}"
allowed_users = [{owner}]
poll_timeout = 5
"""


@dataclass
class Harness:
    fake: FakeTelegram
    home: Home
    model: ScriptedModel
    channel: TelegramChannel
    address: Address

    def run_ask(self, arguments: dict[str, Any]) -> asyncio.Task[Any]:
        """ask_user called in a conversation run bound to this chat."""
        run = run_context(self.home)
        run.channel = self.channel.name
        run.ask_questions = lambda questions: self.channel.ask_questions(  # type: ignore[attr-defined]
            self.address, questions
        )
        return asyncio.create_task(ask_user.invoke(run, arguments))

    def ask(self, *questions: Question) -> asyncio.Task[QuestionOutcome]:
        return asyncio.create_task(self.channel.ask_questions(self.address, list(questions)))

    async def question_messages(self, count: int, *, read_back: bool = True) -> list[int]:
        """Wait for `count` messages with a keyboard, each one the channel has had back from
        sendMessage unless not `read_back` (sendMessage's answer held); their ids, in order.
        (A tap between the fake storing a message and the bot reading its id is one no person
        could make; under load the suite made it, and the bot said the question was closed.)"""

        def with_keyboard() -> list[int]:
            return [mid for mid, m in self.fake.messages.items() if "reply_markup" in m["params"]]

        def known_to_the_channel() -> set[int]:
            channel = self.channel
            asked = {pending.message_id for pending in channel._asks.values()}
            return asked | {m for q in channel._question_sets.values() for m in q.message_ids}

        await self.fake.wait_for(
            lambda: (
                len(with_keyboard()) >= count
                and (not read_back or set(with_keyboard()[:count]) <= known_to_the_channel())
            )
        )
        return with_keyboard()

    def buttons(self, message_id: int) -> dict[str, str]:
        """The message's current buttons (after any edit): label → callback data."""
        message = self.fake.messages[message_id]
        markup = (message.get("edited") or message["params"]).get("reply_markup") or {}
        return {
            button["text"]: button["callback_data"]
            for row in markup.get("inline_keyboard", [])
            for button in row
        }

    async def tap(self, message_id: int, label: str, *, user_id: int = OWNER) -> None:
        """Tap a button and wait until the tap is handled in full: answered, and the message
        edited if the tap edits it. (The edit comes after answerCallbackQuery, so waiting for
        that alone raced the assertions that read the edit.) The bot confirms an update with
        its next getUpdates only once it has handled it."""
        update_id = await self.fake.push(
            self.fake.tap(message_id, self.buttons(message_id)[label], user_id=user_id)
        )
        await self.fake.wait_for(lambda: self.fake.confirmed(update_id))


@contextlib.asynccontextmanager
async def _harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chat: str = ""
) -> AsyncIterator[Harness]:
    fake = FakeTelegram()
    base = await fake.start()
    monkeypatch.setenv("ATLAS_TEST_TELEGRAM_TOKEN", TOKEN)
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + chat
    home = make_home(tmp_path / "home", config=config)
    bot_toml = home.root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + BOT_TOML.format(base=base, owner=OWNER))
    home = Home(home.root)
    model = ScriptedModel()
    runtime = Runtime(home, model=model, gate=OpenGate(), registry=ToolRegistry([]))
    dispatcher = Dispatcher(runtime, {})
    channels = await start_channels(home, dispatcher, wait=5)
    channel = channels["telegram:atlas"]
    assert isinstance(channel, TelegramChannel)
    address = Address("atlas", channel.name, str(OWNER))
    try:
        yield Harness(fake, home, model, channel, address)
    finally:
        await dispatcher.shutdown()
        await stop_channels(channels)
        await runtime.close()
        await fake.stop()


@pytest.fixture
async def tg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    async with _harness(tmp_path, monkeypatch) as harness:
        yield harness


async def test_a_tap_answers_and_a_strangers_tap_is_ignored(tg: Harness) -> None:
    task = tg.run_ask(
        {"questions": [{"question": "Which database?", "choices": ["Postgres", "SQLite"]}]}
    )
    [message_id] = await tg.question_messages(1)
    assert list(tg.buttons(message_id)) == ["Postgres", "SQLite", "Other…", "Cancel"]
    datas = list(tg.buttons(message_id).values())
    assert len(set(datas)) == 4 and all(len(d.encode()) <= 64 for d in datas)

    await tg.tap(message_id, "SQLite", user_id=STRANGER)
    assert not task.done()
    assert "edited" not in tg.fake.messages[message_id]

    await tg.tap(message_id, "SQLite")
    result = await asyncio.wait_for(task, 5)
    assert result.text == "The user answered:\n1. Which database?\n   → SQLite"
    await tg.fake.wait_for(lambda: "→" in tg.fake.messages[message_id]["text"])
    edited = tg.fake.messages[message_id]
    assert "SQLite" in edited["text"] and f"user{OWNER}" in edited["text"]
    assert "reply_markup" not in edited["edited"]  # the buttons are gone
    assert tg.model.requests == []


async def test_multi_select_toggles_then_done_and_other_as_free_text(tg: Harness) -> None:
    task = tg.ask(
        Question("Which features?", ("auth", "search", "billing"), multi_select=True),
        Question("Anything else?", ("no",)),
    )
    first, second = await tg.question_messages(2)
    assert "Done" in tg.buttons(first) and "Done" not in tg.buttons(second)
    # Edits that take a while, as on a busy Bot API: a tap must wait for them (issue 19, item 5).
    tg.fake.fail_next("editMessageText", "slow", delay=0.2, times=5)

    await tg.tap(first, "☐ auth")
    await tg.tap(first, "☐ billing")
    await tg.tap(first, "☑ auth")  # toggled off again
    assert list(tg.buttons(first))[:3] == ["☐ auth", "☐ search", "☑ billing"]
    await tg.tap(first, "Done")

    await tg.tap(second, "Other…")
    assert "send your answer" in tg.fake.messages[second]["text"]
    await tg.fake.push(tg.fake.message("dark mode, please", user_id=OWNER))
    outcome = await asyncio.wait_for(task, 5)

    assert outcome.status == "submitted"
    assert [(a.chosen, a.other) for a in outcome.answers] == [
        (("billing",), ""),
        ((), "dark mode, please"),
    ]
    await tg.fake.wait_for(lambda: "dark mode, please" in tg.fake.messages[second]["text"])
    assert tg.model.requests == [], "the written answer did not start a turn"


async def test_no_answer_in_time_is_timed_out_and_the_message_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _harness(tmp_path, monkeypatch, chat="\n[chat]\nask_user_timeout = 0.3\n") as tg:
        task = tg.run_ask({"questions": [{"question": "Proceed?", "choices": ["yes", "no"]}]})
        [message_id] = await tg.question_messages(1)
        yes = tg.buttons(message_id)["yes"]
        result = await asyncio.wait_for(task, 5)
        assert result.text.startswith("Nobody answered within 0 s")
        await tg.fake.wait_for(lambda: "edited" in tg.fake.messages[message_id])
        assert "no answer in time" in tg.fake.messages[message_id]["text"]
        # A late tap finds the question closed.
        await tg.fake.push(tg.fake.tap(message_id, yes, user_id=OWNER))
        await tg.fake.wait_for(lambda: bool(tg.fake.calls_to("answerCallbackQuery")))
        assert tg.fake.calls_to("answerCallbackQuery")[-1]["text"] == (
            "This question is already closed."
        )


async def test_a_question_telegram_refuses_is_undelivered(tg: Harness) -> None:
    tg.fake.fail_next("sendMessage", "400")
    result = await asyncio.wait_for(
        tg.run_ask({"questions": [{"question": "Colour?", "choices": ["red"]}]}), 5
    )
    assert result.text.startswith("The questions could not be shown to the user")
    assert "chat not found" in result.text


async def test_cancel_closes_every_question(tg: Harness) -> None:
    task = tg.ask(Question("One?", ("a",)), Question("Two?", ("b",)))
    first, second = await tg.question_messages(2)
    await tg.tap(second, "Cancel")
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "cancelled" and f"user{OWNER}" in outcome.detail
    for message_id in (first, second):
        await tg.fake.wait_for(lambda m=message_id: "cancelled by" in tg.fake.messages[m]["text"])


# ---- a button counts only in the chat where it was asked (issue 18, item 10) ---------------------

OTHER_CHAT = -100999


def tap_elsewhere(tg: Harness, message_id: int, data: str, *, user_id: int = OWNER) -> dict:
    """A tap whose message is in another chat: a forwarded copy's button, or forged data."""
    update = tg.fake.tap(message_id, data, user_id=user_id)
    update["callback_query"]["message"]["chat"] = {"id": OTHER_CHAT, "type": "supergroup"}
    return update


async def push_tap(tg: Harness, update: dict) -> list[dict]:
    before = len(tg.fake.calls_to("answerCallbackQuery"))
    await tg.fake.push(update)
    await tg.fake.wait_for(lambda: len(tg.fake.calls_to("answerCallbackQuery")) > before)
    return tg.fake.calls_to("answerCallbackQuery")[before:]


async def test_an_approval_tap_from_another_chat_is_refused(tg: Harness) -> None:
    waiting = asyncio.create_task(tg.channel.ask(tg.address, "Delete build/?", ["Allow", "Deny"]))
    [message_id] = await tg.question_messages(1)
    allow = tg.buttons(message_id)["Allow"]
    answered = await push_tap(tg, tap_elsewhere(tg, message_id, allow))
    assert "chat where it was asked" in answered[0]["text"]
    another_message = tg.fake.tap(message_id, allow)
    another_message["callback_query"]["message"]["message_id"] = message_id + 50
    await push_tap(tg, another_message)
    await asyncio.sleep(0.05)
    assert not waiting.done() and "edited" not in tg.fake.messages[message_id]
    await tg.tap(message_id, "Allow")
    assert await asyncio.wait_for(waiting, 5) == "Allow"


async def test_an_ask_user_tap_from_another_chat_is_refused(tg: Harness) -> None:
    task = tg.ask(Question("Which database?", ("Postgres", "SQLite")))
    [message_id] = await tg.question_messages(1)
    sqlite = tg.buttons(message_id)["SQLite"]
    answered = await push_tap(tg, tap_elsewhere(tg, message_id, sqlite))
    assert "chat where it was asked" in answered[0]["text"]
    assert not task.done() and "edited" not in tg.fake.messages[message_id]
    await tg.tap(message_id, "SQLite")
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status == "submitted"


async def test_in_a_group_conversation_of_one_person_only_they_or_the_owner_answer(
    tg: Harness,
) -> None:
    from atlas.channels.access import approve_pairing, request_pairing

    store = tg.channel.access.store
    for person in (42, 43):  # two paired people
        pairing = await request_pairing(store, "atlas", "telegram", str(person))
        assert pairing is not None
        await approve_pairing(store, pairing.code)
    group = Address("atlas", tg.channel.name, "-100123", user="42")
    waiting = asyncio.create_task(tg.channel.ask(group, "Run it?", ["Yes", "No"]))
    [message_id] = await tg.question_messages(1)
    answered = await push_tap(
        tg, tg.fake.tap(message_id, tg.buttons(message_id)["Yes"], user_id=43)
    )
    assert "Only the person who asked" in answered[0]["text"]
    assert not waiting.done()
    await tg.tap(message_id, "No", user_id=42)
    assert await asyncio.wait_for(waiting, 5) == "No"


# ---- a stranger in a group gets the pairing code privately (issue 18, item 10) -------------------

GROUP = -100777


async def test_a_strangers_code_goes_privately_not_to_the_group(tg: Harness) -> None:
    from atlas.channels.access import SENT_PRIVATELY, list_pairings

    store = tg.channel.access.store
    await tg.fake.push(tg.fake.mention("hi", user_id=STRANGER, chat_id=GROUP, chat_type="group"))
    await tg.fake.wait_for(lambda: tg.fake.sent_texts(GROUP) != [])
    [pairing] = await list_pairings(store)
    assert tg.fake.sent_texts(GROUP) == [SENT_PRIVATELY]
    [private] = tg.fake.sent_texts(STRANGER)
    assert pairing.code in private
    assert all(pairing.code not in text for text in tg.fake.sent_texts(GROUP))


async def test_a_stranger_who_never_started_the_bot_is_told_to_write_directly(tg: Harness) -> None:
    from atlas.channels.access import WRITE_DIRECTLY, list_pairings

    store = tg.channel.access.store
    tg.fake.fail_next("sendMessage", "400")  # Telegram: the bot may not write to them first
    await tg.fake.push(tg.fake.mention("hi", user_id=STRANGER, chat_id=GROUP, chat_type="group"))
    await tg.fake.wait_for(lambda: tg.fake.sent_texts(GROUP) != [])
    assert tg.fake.sent_texts(GROUP) == [WRITE_DIRECTLY]
    assert tg.fake.sent_texts(STRANGER) == [] and await list_pairings(store) == []
    # They write privately, and get their code there.
    await tg.fake.push(tg.fake.message("hello", user_id=STRANGER))
    await tg.fake.wait_for(lambda: tg.fake.sent_texts(STRANGER) != [])
    [pairing] = await list_pairings(store)
    assert pairing.code in tg.fake.sent_texts(STRANGER)[0]
    assert all(pairing.code not in text for text in tg.fake.sent_texts(GROUP))


async def test_questions_answered_on_the_dashboard_show_their_answers_on_telegram(
    tg: Harness,
) -> None:
    from atlas.channels.base import Answer
    from atlas.pending_asks import PendingAsks

    asks = PendingAsks()
    questions = [Question("Which database?", ("Postgres", "SQLite")), Question("Name?")]
    waiting = asyncio.create_task(
        asks.question_set(
            tg.address, 1, questions, lambda: tg.channel.ask_questions(tg.address, questions)
        )
    )
    first, second = await tg.question_messages(2)
    answers = [Answer(("SQLite",)), Answer(other="atlas")]
    assert asks.answer_questions(asks.open()[0].id, answers)
    outcome = await asyncio.wait_for(waiting, 5)
    assert outcome.status == "submitted" and outcome.answers[0].chosen == ("SQLite",)
    await tg.fake.wait_for(lambda: "edited" in tg.fake.messages[second])
    assert "SQLite (on the dashboard)" in tg.fake.messages[first]["text"]
    assert "“atlas” (on the dashboard)" in tg.fake.messages[second]["text"]
    assert tg.buttons(first) == {} and tg.buttons(second) == {}  # nothing left to tap


# ---- a wait cancelled while its question is being sent still closes it ---------------------------

NO_ANSWER_IN_TIME = None  # a plain cancel: a timeout or /stop


async def question_rows(tg: Harness) -> list[tuple[str, str | None]]:
    """(state, platform_id) of the bot's question rows in the outbox."""
    db = await tg.channel.dispatcher.outbox.database("atlas")
    return await db.quick(
        lambda conn: [
            tuple(r)
            for r in conn.execute(
                "SELECT state, platform_id FROM outbox WHERE kind = 'question' ORDER BY id"
            )
        ]
    )


async def cancel_while_sent(
    tg: Harness,
    waiting: asyncio.Task[Any],
    reason: AnsweredElsewhere | None,
    answer: asyncio.Event,
) -> int:
    """With sendMessage held (carried out, its `answer` not yet back), cancel the wait, then
    let the answer through: the cancel still ends the wait. The question's message id."""
    [message_id] = await tg.question_messages(1, read_back=False)
    waiting.cancel(reason)
    await asyncio.sleep(0)  # the cancel lands while the send waits for its answer
    assert not waiting.done()
    answer.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 5)
    await tg.fake.wait_for(lambda: "edited" in tg.fake.messages[message_id], timeout=5)
    return message_id


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (NO_ANSWER_IN_TIME, "no answer in time"),
        (AnsweredElsewhere(("Deny",)), "Deny (on the dashboard)"),
    ],
)
async def test_an_approval_cancelled_while_it_is_sent_is_closed(
    tg: Harness, reason: AnsweredElsewhere | None, shown: str
) -> None:
    gate = tg.fake.hold("sendMessage")
    waiting = asyncio.create_task(tg.channel.ask(tg.address, "Delete build/?", ["Allow", "Deny"]))
    message_id = await cancel_while_sent(tg, waiting, reason, gate)
    assert shown in tg.fake.messages[message_id]["text"]
    assert tg.buttons(message_id) == {}  # nothing left to tap
    assert await question_rows(tg) == [("delivered", str(message_id))]


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        (NO_ANSWER_IN_TIME, "no answer in time"),
        (AnsweredElsewhere(("SQLite", "“atlas”")), "SQLite (on the dashboard)"),
    ],
)
async def test_questions_cancelled_while_the_first_is_sent_are_closed(
    tg: Harness, reason: AnsweredElsewhere | None, shown: str
) -> None:
    gate = tg.fake.hold("sendMessage")
    waiting = tg.ask(Question("Which database?", ("Postgres", "SQLite")), Question("Name?"))
    message_id = await cancel_while_sent(tg, waiting, reason, gate)
    assert shown in tg.fake.messages[message_id]["text"]
    assert tg.buttons(message_id) == {}
    assert len(tg.fake.calls_to("sendMessage")) == 1  # the second question was never put
    assert await question_rows(tg) == [("delivered", str(message_id))]
