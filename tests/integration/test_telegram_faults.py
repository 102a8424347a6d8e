"""Telegram as real servers sometimes answer (issue 19, items 1 and 2): the nginx in front of
the Bot API answers 502 with its HTML page, an empty body or JSON cut short, or the connection
closes after Telegram carried the request out. Real aiogram against the fake, with the real
Dispatcher: a reply arrives once, or the person is told it may not have; polling goes on."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.channels.send_errors import MAYBE_LOST
from atlas.channels.telegram import inbound as telegram_inbound
from atlas.dispatch import Inbound
from atlas.outbox.notes import RESENT_LABEL
from atlas.outbox.rows import open_rows
from atlas.providers.scripted import Reply
from atlas.workers.link import LinkClosed
from tests.integration.test_telegram import OWNER, Harness, _harness

ANSWER = "the answer"
ADDRESS = Address("atlas", "telegram:atlas", str(OWNER))

# (shape, status): the fake carries out a request whose spoiled answer has a 2xx status.
NOT_CARRIED_OUT = [("html502", None), ("empty", None), ("truncated", 502)]
CARRIED_OUT = [("truncated", None), ("empty", 200), ("drop_after", None)]


@pytest.fixture
async def tg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    async with _harness(tmp_path, monkeypatch) as harness:
        yield harness


async def outbox_rows(tg: Harness) -> list[tuple[str, str, str | None]]:
    await tg.dispatcher.outbox.drained()
    store = await tg.runtime.store(tg.home.bot("atlas"))
    return await store.db.quick(
        lambda db: [tuple(r) for r in db.execute("SELECT kind, state, key FROM outbox ORDER BY id")]
    )


async def owed_answers(tg: Harness) -> list[object]:
    """What a restart now would send again (or say may be lost): the open outbox rows."""
    await tg.dispatcher.wait_idle(ADDRESS)
    await tg.dispatcher.outbox.drained()
    store = await tg.runtime.store(tg.home.bot("atlas"))
    later = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return await store.db.quick(lambda db: open_rows(db, "atlas", before=later))


@pytest.mark.parametrize(("shape", "status"), NOT_CARRIED_OUT)
async def test_a_send_the_proxy_spoiled_is_retried_and_arrives_once(
    tg: Harness, shape: str, status: int | None
) -> None:
    tg.fake.fail_next("sendMessage", shape, status=status)
    tg.model.add(Reply(ANSWER))
    await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.fake.wait_for(lambda: not tg.fake.faults and ANSWER in tg.fake.sent_texts(OWNER))
    assert await owed_answers(tg) == []
    assert tg.fake.sent_texts(OWNER) == [ANSWER]


@pytest.mark.parametrize(("shape", "status"), CARRIED_OUT)
async def test_a_send_whose_answer_was_lost_is_sent_once_more_labelled(
    tg: Harness, shape: str, status: int | None
) -> None:
    """Telegram carried the message out but its answer was lost: Telegram cannot be asked,
    and an answer must reach the person, so it goes once more with a label saying it may
    appear twice. The outbox keeps both rows."""
    tg.fake.fail_next("sendMessage", shape, status=status)
    tg.model.add(Reply(ANSWER))
    await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.fake.wait_for(lambda: len(tg.fake.sent_texts(OWNER)) == 2)
    assert await owed_answers(tg) == []  # a restart sends nothing again
    assert tg.fake.sent_texts(OWNER) == [ANSWER, f"{RESENT_LABEL}\n\n{ANSWER}"]
    assert await outbox_rows(tg) == [("answer", "maybe", None), ("answer", "delivered", "resend:1")]


async def test_a_send_dropped_before_telegram_took_it_arrives_once_labelled(tg: Harness) -> None:
    """From the bot's side a connection dropped before the request reached Telegram looks the
    same as one dropped after: sent once more, labelled, it arrives."""
    tg.fake.fail_next("sendMessage", "drop")
    tg.model.add(Reply(ANSWER))
    await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.fake.wait_for(lambda: bool(tg.fake.sent_texts(OWNER)))
    await tg.dispatcher.outbox.drained()
    assert tg.fake.sent_texts(OWNER) == [f"{RESENT_LABEL}\n\n{ANSWER}"]
    assert await owed_answers(tg) == []


async def test_a_resend_in_doubt_too_is_not_sent_a_third_time(tg: Harness) -> None:
    tg.fake.fail_next("sendMessage", "drop_after")
    tg.fake.fail_next("sendMessage", "drop_after")
    tg.model.add(Reply(ANSWER))
    await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.fake.wait_for(lambda: MAYBE_LOST in tg.fake.sent_texts(OWNER))
    assert tg.fake.sent_texts(OWNER) == [ANSWER, f"{RESENT_LABEL}\n\n{ANSWER}", MAYBE_LOST]
    assert await owed_answers(tg) == []


async def test_only_the_part_in_doubt_and_what_follows_go_again(tg: Harness) -> None:
    paragraph = "word " * 700  # two parts
    tg.fake.fail_next("sendMessage", "drop_after")
    tg.fake.fail_next("sendMessage", "html502")  # the resend's first part: retried
    tg.model.add(Reply(f"START {paragraph}\n\nFIRST END\n\n{paragraph}\n\nSECOND END"))
    await tg.fake.push(tg.fake.message("long please", user_id=OWNER))
    await tg.fake.wait_for(lambda: "SECOND END" in "".join(tg.fake.sent_texts(OWNER)))
    await tg.dispatcher.outbox.drained()
    texts = tg.fake.sent_texts(OWNER)
    assert texts[0].startswith("START") and texts[0].rstrip().endswith("FIRST END")
    assert texts[1].startswith(RESENT_LABEL) and "FIRST END" in texts[1]
    assert "".join(texts).count("SECOND END") == 1  # never sent before: sent once
    assert MAYBE_LOST not in texts and not tg.fake.faults


async def test_a_button_tap_answered_with_a_502_page_is_answered_again(
    tg: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """answerCallbackQuery and editMessageText are safe to repeat: retried like a 5xx."""
    tg.fake.fail_next("answerCallbackQuery", "html502")
    tg.fake.fail_next("editMessageText", "drop_after")
    waiting = asyncio.create_task(tg.channel.ask(ADDRESS, "Go?", ["Yes", "No"]))
    await tg.fake.wait_for(lambda: bool(tg.fake.messages))
    [message_id] = tg.fake.messages
    markup = tg.fake.messages[message_id]["params"]["reply_markup"]["inline_keyboard"]
    yes = next(row[0]["callback_data"] for row in markup if row[0]["text"] == "Yes")
    await tg.fake.push(tg.fake.tap(message_id, yes, user_id=OWNER))
    assert await asyncio.wait_for(waiting, 5) == "Yes"
    await tg.fake.wait_for(lambda: len(tg.fake.calls_to("editMessageText")) == 2)
    assert len(tg.fake.calls_to("answerCallbackQuery")) == 1  # the 502 never reached the API
    assert "Yes" in tg.fake.messages[message_id]["text"]
    # The repeated edit met "message is not modified": the first one took effect, all is well.
    await tg.dispatcher.wait_idle(ADDRESS)
    assert not [r for r in caplog.records if "could not edit" in r.getMessage()]


@pytest.mark.parametrize(
    ("shape", "status"), [*NOT_CARRIED_OUT, *CARRIED_OUT, ("drop", None), ("500", None)]
)
async def test_polling_goes_on_after_getupdates_fails_in_any_shape(
    tg: Harness,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    shape: str,
    status: int | None,
) -> None:
    monkeypatch.setattr(telegram_inbound, "POLL_RETRY_FIRST", 0.05)
    tg.model.add(Reply("first answer"), Reply("second answer"))
    # The poll waiting now is past the fault check: the next one (after this message) meets it.
    tg.fake.fail_next("getUpdates", shape, status=status)
    await tg.fake.push(tg.fake.message("one", user_id=OWNER))
    await tg.replies(OWNER, 1)
    await tg.fake.wait_for(lambda: not tg.fake.faults)
    # A poll the fake carried out handed this message before its answer was spoiled: Telegram
    # hands it again to the next poll, and it is answered once.
    await tg.fake.push(tg.fake.message("two", user_id=OWNER))
    await tg.replies(OWNER, 2)
    await tg.dispatcher.wait_idle(ADDRESS)
    assert tg.fake.sent_texts(OWNER) == ["first answer", "second answer"]
    failures = [r for r in caplog.records if "getUpdates failed" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING]
    assert "<body>" not in failures[0].getMessage()  # named shortly, not the whole page


async def test_a_crash_between_sending_and_delivered_tells_once_and_never_resends(
    tg: Harness,
) -> None:
    """The outbox marks the answer `sending`, Telegram has the request, and the process dies
    before the answer comes back. The next start (and any after it) says once that it may not
    have reached them, and never sends the answer again."""
    from atlas.recovery import MAYBE_LOST as RESTARTED_WHILE_SENDING
    from atlas.recovery import resume_interrupted_turns

    tg.fake.fail_next("sendMessage", "slow", delay=1.0)
    tg.model.add(Reply(ANSWER))
    await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.fake.wait_for(lambda: not tg.fake.faults)  # Telegram has the request
    store = await tg.runtime.store(tg.home.bot("atlas"))

    rows = await store.db.quick(
        lambda db: [tuple(r) for r in db.execute("SELECT kind, state FROM outbox ORDER BY id")]
    )
    assert rows == [("answer", "sending")]
    await tg.dispatcher.shutdown()  # the kill: lanes and the outbox's queues are gone
    # Telegram carries the request out all the same: the answer did arrive.
    await tg.fake.wait_for(lambda: ANSWER in tg.fake.sent_texts(OWNER))
    later = datetime.now(UTC) + timedelta(seconds=1)
    for _ in range(2):  # the next start, and one more
        await resume_interrupted_turns(tg.dispatcher, started_at=later, now=later)
        await tg.dispatcher.outbox.drained()
    sent = tg.fake.sent_texts(OWNER)
    assert sent.count(RESTARTED_WHILE_SENDING) == 1
    assert sent.count(ANSWER) == 1  # it arrived before the restart: never a second time
    rows = await store.db.quick(
        lambda db: [tuple(r) for r in db.execute("SELECT kind, state FROM outbox ORDER BY id")]
    )
    assert rows == [("answer", "maybe"), ("notice", "delivered")]


async def test_a_message_whose_storing_failed_comes_again_and_is_answered_once(
    tg: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store locked by another process, or a worker process being restarted: the update is
    not confirmed, getUpdates brings it again, and it is stored and answered then."""
    monkeypatch.setattr(telegram_inbound, "NOT_STORED_PAUSE", 0.01)
    real_submit = tg.dispatcher.submit
    failures = [sqlite3.OperationalError("database is locked"), LinkClosed("worker 1 restarting")]

    async def flaky_submit(inbound: object) -> bool:
        if failures:
            raise failures.pop(0)
        return await real_submit(inbound)  # type: ignore[arg-type]

    monkeypatch.setattr(tg.dispatcher, "submit", flaky_submit)
    tg.model.add(Reply(ANSWER))
    update_id = await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
    await tg.fake.wait_for(lambda: ANSWER in tg.fake.sent_texts(OWNER))
    assert failures == []  # failed twice, stored the third time
    assert tg.fake.sent_texts(OWNER) == [ANSWER]
    await tg.fake.wait_for(lambda: tg.fake.confirmed(update_id))


async def test_a_message_that_never_stores_is_given_up_and_polling_goes_on(
    tg: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(telegram_inbound, "NOT_STORED_PAUSE", 0.01)
    real_submit = tg.dispatcher.submit

    async def refuses_the_first(inbound: Inbound) -> bool:
        if inbound.text == "doomed":
            raise RuntimeError("a bug that does not pass")
        return await real_submit(inbound)

    monkeypatch.setattr(tg.dispatcher, "submit", refuses_the_first)
    tg.model.add(Reply(ANSWER))
    with caplog.at_level(logging.WARNING, logger="atlas"):
        await tg.fake.push(tg.fake.message("doomed", user_id=OWNER))
        await tg.fake.push(tg.fake.message("hello", user_id=OWNER))
        await tg.fake.wait_for(lambda: ANSWER in tg.fake.sent_texts(OWNER))
    tries = [r for r in caplog.records if "not stored yet" in r.message]
    assert len(tries) == telegram_inbound.NOT_STORED_TRIES - 1
    assert any("failed" in r.message and r.levelno == logging.ERROR for r in caplog.records)


async def test_a_chat_whose_message_is_slow_to_store_does_not_hold_up_another(
    tg: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One getUpdates answer, two chats: each chat's updates are handled in order, the chats
    side by side (a store in another worker process costs a round trip per message)."""
    release = asyncio.Event()
    real_submit = tg.dispatcher.submit

    async def slow_for_the_owner(inbound: Inbound) -> bool:
        if inbound.address.chat == str(OWNER):
            await release.wait()
        return await real_submit(inbound)

    monkeypatch.setattr(tg.dispatcher, "submit", slow_for_the_owner)
    tg.model.add(Reply(ANSWER))
    stranger = 99
    await tg.fake.push(tg.fake.message("hello", user_id=OWNER))  # both in one batch: nothing
    await tg.fake.push(tg.fake.message("who are you?", user_id=stranger))  # awaits between
    # The stranger's pairing reply goes out while the owner's message is still being stored.
    await tg.fake.wait_for(lambda: tg.fake.sent_texts(stranger), timeout=10)
    assert tg.fake.sent_texts(OWNER) == []
    release.set()
    await tg.fake.wait_for(lambda: tg.fake.sent_texts(OWNER) == [ANSWER])


async def test_messages_sent_while_the_store_cannot_write_are_held_not_dropped(
    tg: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: SQLite refuses every write of the bot's store (a real sqlite3 error on its
    connection) for longer than the tries a faulty message gets. The messages stay unconfirmed
    (Telegram keeps them), the channel's health says why, and once the store can write they are
    stored, in the order sent, and answered."""
    monkeypatch.setattr(telegram_inbound, "NOT_STORED_PAUSE", 0.01)
    store = await tg.runtime.store(tg.home.bot("atlas"))

    def deny(action: int, *_: object) -> int:
        writes = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
        return sqlite3.SQLITE_DENY if action in writes else sqlite3.SQLITE_OK

    await store.db.quick(lambda db: db.conn.set_authorizer(deny))
    for _ in range(4):
        tg.model.add(Reply(ANSWER))
    sent = [f"message {n}" for n in range(4)]
    ids = [await tg.fake.push(tg.fake.message(text, user_id=OWNER)) for text in sent]
    # Well past the tries (NOT_STORED_TRIES) a message that fails for another reason gets.
    await tg.fake.wait_for(
        lambda: len(tg.fake.calls_to("getUpdates")) > 3 * telegram_inbound.NOT_STORED_TRIES
    )
    health = tg.channel.health.current
    assert health.state == "reconnecting" and "the store cannot write" in health.reason
    assert "not authorized" in health.reason
    assert not any(tg.fake.confirmed(update_id) for update_id in ids)
    await store.db.quick(lambda db: db.conn.set_authorizer(None))
    await tg.fake.wait_for(lambda: all(tg.fake.confirmed(update_id) for update_id in ids))
    await tg.fake.wait_for(lambda: ANSWER in tg.fake.sent_texts(OWNER))
    await tg.dispatcher.wait_idle(ADDRESS)
    conversation = await store.conversation("telegram:atlas", str(OWNER), bot="atlas")
    stored = [m.content for m in await store.history(conversation.id) if m.role == "user"]
    assert stored == sent
    assert tg.channel.health.current.state == "up"
