"""The outbox against a fake adapter: every state a row can reach, kept rows ahead of new ones,
and crashes between states (a worker stopped mid-send, the file reopened by a new process)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.outbox.errors import MaybeDelivered, NeverRetry, RetryLater
from atlas.outbox.notes import CONNECTION_BROKE, EARLIER_REPLY, RESTARTED_WHILE_SENDING
from atlas.outbox.resume import resume_outbox
from atlas.outbox.rows import Outgoing
from atlas.outbox.sender import Outbox
from atlas.providers.base import Message
from atlas.store.conversations import ConversationStore
from atlas.store.db import Database

CHANNEL = "fake:atlas"
HERE = Address("atlas", CHANNEL, "42")
THERE = Address("atlas", CHANNEL, "43")


class FakeAdapter:
    """A thin channel: each send takes the next scripted outcome (an exception to raise, or
    None to succeed); `sent` holds what went out, `hold` makes a send wait (a crash window)."""

    name = CHANNEL

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.sent: list[tuple[Address, str]] = []
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> str:
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        self.sent.append((address, text))
        return f"m{len(self.sent)}"

    def texts(self) -> list[str]:
        return [text for _, text in self.sent]


@contextlib.asynccontextmanager
async def opened(path: Path) -> AsyncIterator[ConversationStore]:
    store = ConversationStore(path)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def outbox_over(store: ConversationStore, adapter: FakeAdapter, **options: float) -> Outbox:
    async def database(bot: str) -> Database:
        return store.db

    return Outbox({CHANNEL: adapter}, database, **options)


def states(path: Path) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT kind, state, text FROM outbox ORDER BY id").fetchall()


async def stored_answer(store: ConversationStore, text: str, notes: tuple[str, ...] = ()):
    """A person's message and its answer, stored with the answer's rows in one transaction."""
    conversation = await store.conversation(CHANNEL, HERE.chat, bot="atlas")
    asked = await store.append(conversation.id, Message("user", "hello"))
    outgoing = Outgoing(HERE, text, notes=notes)
    answer_id = await store.append(
        conversation.id, Message("assistant", text), answers_upto=asked, also=outgoing
    )
    return conversation.id, answer_id, outgoing.rows


async def test_a_delivered_row_records_the_platform_id(tmp_path: Path) -> None:
    adapter = FakeAdapter()
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter)
        delivery = await outbox.send(HERE, "hi", kind="note")
    assert (delivery.state, delivery.platform_id) == ("delivered", "m1")
    assert adapter.texts() == ["hi"]
    assert states(tmp_path / "c.db") == [("note", "delivered", "hi")]


async def test_an_answer_and_its_rows_are_one_transaction_notes_first(tmp_path: Path) -> None:
    adapter = FakeAdapter()
    async with opened(tmp_path / "c.db") as store:
        _, answer_id, rows = await stored_answer(store, "the answer", notes=("(a note)",))
        assert [r.kind for r in rows] == ["note", "answer"]
        assert rows[1].message_id == answer_id
        deliveries = await outbox_over(store, adapter).deliver(rows)
    assert [d.state for d in deliveries] == ["delivered", "delivered"]
    assert adapter.texts() == ["(a note)", "the answer"]


async def test_an_append_that_fails_writes_no_row(tmp_path: Path) -> None:
    async with opened(tmp_path / "c.db") as store:
        with pytest.raises(Exception, match="no conversation"):
            await store.append(999, Message("assistant", "x"), also=Outgoing(HERE, "x"))
    assert states(tmp_path / "c.db") == []


async def test_an_outage_keeps_the_row_and_those_behind_it_then_they_go_first_once(
    tmp_path: Path,
) -> None:
    adapter = FakeAdapter(RetryLater("502"))
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter, retry_first=3600)  # only a new row retries
        assert (await outbox.send(HERE, "first", kind="answer")).state == "kept"
        assert states(tmp_path / "c.db") == [("answer", "kept", "first")]
        assert (await outbox.send(HERE, "second", kind="answer")).state == "delivered"
        await outbox.shutdown()
    assert adapter.texts() == [f"{EARLIER_REPLY}\n\nfirst", "second"]
    assert [s[1] for s in states(tmp_path / "c.db")] == ["delivered", "delivered"]


async def test_rows_queued_behind_a_kept_one_are_kept_not_sent_out_of_order(
    tmp_path: Path,
) -> None:
    adapter = FakeAdapter(None, RetryLater("502"), RetryLater("502"))
    adapter.hold = asyncio.Event()
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter, retry_first=3600)
        first = asyncio.create_task(outbox.send(HERE, "one", kind="note"))
        await adapter.entered.wait()
        second = asyncio.create_task(outbox.send(HERE, "two", kind="answer"))
        third = asyncio.create_task(outbox.send(HERE, "three", kind="answer"))
        await asyncio.sleep(0.05)
        adapter.hold.set()
        results = [d.state for d in await asyncio.gather(first, second, third)]
        await outbox.shutdown()
    assert results == ["delivered", "kept", "kept"]
    assert adapter.texts() == ["one"]
    assert [s[1] for s in states(tmp_path / "c.db")] == ["delivered", "kept", "kept"]


async def test_a_kept_row_is_tried_again_alone_after_the_backoff(tmp_path: Path) -> None:
    adapter = FakeAdapter(RetryLater("502"), RetryLater("502"))
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter, retry_first=0.05, retry_cap=0.1)
        assert (await outbox.send(HERE, "late", kind="answer")).state == "kept"
        for _ in range(100):
            if adapter.sent:
                break
            await asyncio.sleep(0.02)
        await outbox.shutdown()
    assert adapter.texts() == [f"{EARLIER_REPLY}\n\nlate"]
    assert states(tmp_path / "c.db")[0][1] == "delivered"


async def test_the_platforms_wait_is_honoured_even_when_a_new_row_comes(tmp_path: Path) -> None:
    adapter = FakeAdapter(RetryLater("429", after=0.3))
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter, retry_first=0.01)
        started = asyncio.get_running_loop().time()
        assert (await outbox.send(HERE, "one", kind="answer")).state == "kept"
        second = await outbox.send(HERE, "two", kind="answer")
        waited = asyncio.get_running_loop().time() - started
    # The new row waited out the platform's 0.3 s behind the kept one, then both went.
    assert second.state == "delivered"
    assert waited >= 0.29
    assert adapter.texts() == [f"{EARLIER_REPLY}\n\none", "two"]


async def test_a_reply_cut_by_an_outage_is_resent_from_where_it_stopped(tmp_path: Path) -> None:
    adapter = FakeAdapter(RetryLater("502", unsent="part two"))
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter, retry_first=3600)
        await outbox.send(HERE, "part one\n\npart two", kind="answer")
        await outbox.send(HERE, "next", kind="answer")
        await outbox.shutdown()
    assert adapter.texts() == [f"{EARLIER_REPLY}\n\npart two", "next"]


async def test_a_refused_row_fails_and_the_next_goes(tmp_path: Path) -> None:
    adapter = FakeAdapter(NeverRetry("blocked"))
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter)
        refused = await outbox.send(HERE, "one", kind="answer")
        assert (refused.state, refused.error) == ("failed", "blocked")
        assert (await outbox.send(HERE, "two", kind="answer")).state == "delivered"
    assert adapter.texts() == ["two"]
    assert [s[1] for s in states(tmp_path / "c.db")] == ["failed", "delivered"]


async def test_maybe_delivered_is_never_resent_and_the_person_is_told_once(
    tmp_path: Path,
) -> None:
    adapter = FakeAdapter(MaybeDelivered("connection closed after the request"))
    async with opened(tmp_path / "c.db") as store:
        conversation_id, _, rows = await stored_answer(store, "the answer")
        outbox = outbox_over(store, adapter)
        [delivery] = await outbox.deliver(rows)
        assert delivery.state == "maybe"
        for _ in range(100):
            if adapter.sent:
                break
            await asyncio.sleep(0.02)
        history = await store.history(conversation_id)
    assert adapter.texts() == [CONNECTION_BROKE]
    assert [s[:2] for s in states(tmp_path / "c.db")] == [
        ("answer", "maybe"),
        ("notice", "delivered"),
    ]
    # The note is the conversation's last answer: the model knows what the person was told.
    assert history[-1].content == CONNECTION_BROKE


async def test_a_key_makes_one_row_however_often_it_is_enqueued(tmp_path: Path) -> None:
    adapter = FakeAdapter()
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, adapter)
        first = await outbox.send(HERE, "report", kind="report", key="routine-run:7")
        again = await outbox.send(HERE, "report", kind="report", key="routine-run:7")
    assert first.state == again.state == "delivered"
    assert adapter.texts() == ["report"]


async def test_no_channel_keeps_the_row_until_one_is_there(tmp_path: Path) -> None:
    adapter = FakeAdapter()
    async with opened(tmp_path / "c.db") as store:
        channels: dict[str, FakeAdapter] = {}

        async def database(bot: str) -> Database:
            return store.db

        outbox = Outbox(channels, database, retry_first=0.05)
        assert (await outbox.send(HERE, "hi", kind="answer")).state == "kept"
        channels[CHANNEL] = adapter
        for _ in range(100):
            if adapter.sent:
                break
            await asyncio.sleep(0.02)
        await outbox.shutdown()
    assert adapter.texts() == [f"{EARLIER_REPLY}\n\nhi"]


async def test_addresses_do_not_wait_for_each_other(tmp_path: Path) -> None:
    slow = FakeAdapter()
    slow.hold = asyncio.Event()

    class Both(FakeAdapter):
        async def send(self, address: Address, text: str, files: list[Path] | None = None):
            if address == HERE:
                return await slow.send(address, text, files)
            return await super().send(address, text, files)

    other = Both()
    async with opened(tmp_path / "c.db") as store:
        outbox = outbox_over(store, other)
        held = asyncio.create_task(outbox.send(HERE, "slow", kind="answer"))
        assert (await outbox.send(THERE, "quick", kind="answer")).state == "delivered"
        slow.hold.set()
        await held


# ------------------------------------------------------------ crashes between states


async def crash_while_sending(path: Path) -> None:
    """A process that stored an answer and died while the platform had it."""
    adapter = FakeAdapter()
    adapter.hold = asyncio.Event()  # never set: the platform never answers
    async with opened(path) as store:
        _, _, rows = await stored_answer(store, "the answer")
        outbox = outbox_over(store, adapter)
        outbox.queue(rows)
        await adapter.entered.wait()
        await outbox.shutdown()  # the kill: the row stays `sending`


async def restart(path: Path, adapter: FakeAdapter, sent: int) -> None:
    async with opened(path) as store:
        outbox = outbox_over(store, adapter)
        await resume_outbox(outbox, ["atlas"], started_at=datetime.now(UTC) + timedelta(1))
        for _ in range(100):
            if len(adapter.sent) >= sent:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)
        await outbox.shutdown()


async def test_a_crash_before_sending_sends_it_at_the_next_start_once(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with opened(path) as store:
        await stored_answer(store, "the answer")  # stored; the process died before sending
    adapter = FakeAdapter()
    await restart(path, adapter, 1)
    await restart(path, adapter, 1)
    assert adapter.texts() == ["the answer"]
    assert states(path) == [("answer", "delivered", "the answer")]


async def test_a_crash_while_sending_tells_once_and_never_resends(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    await crash_while_sending(path)
    assert states(path) == [("answer", "sending", "the answer")]
    adapter = FakeAdapter()
    await restart(path, adapter, 1)
    await restart(path, adapter, 1)  # and once more: nothing left to say
    assert adapter.texts() == [RESTARTED_WHILE_SENDING]
    assert [s[:2] for s in states(path)] == [("answer", "maybe"), ("notice", "delivered")]


async def test_a_crash_while_telling_tells_again_never_the_answer(tmp_path: Path) -> None:
    """The note is caught too: it may not have arrived either, so the person is told again
    (as the old owed-note path did), until one surely went; the answer is never resent."""
    path = tmp_path / "c.db"
    await crash_while_sending(path)
    # The next start queues the note and dies while the platform has it.
    adapter = FakeAdapter()
    adapter.hold = asyncio.Event()
    async with opened(path) as store:
        outbox = outbox_over(store, adapter)
        await resume_outbox(outbox, ["atlas"], started_at=datetime.now(UTC) + timedelta(1))
        await adapter.entered.wait()
        await outbox.shutdown()
    assert [s[:2] for s in states(path)] == [("answer", "maybe"), ("notice", "sending")]
    later = FakeAdapter()
    await restart(path, later, 1)
    await restart(path, later, 1)
    assert later.texts() == [RESTARTED_WHILE_SENDING]
    assert [s[:2] for s in states(path)] == [
        ("answer", "maybe"),
        ("notice", "maybe"),
        ("notice", "delivered"),
    ]


async def test_a_crash_after_an_outage_sends_the_kept_row_at_the_next_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    async with opened(path) as store:
        outbox = outbox_over(store, FakeAdapter(RetryLater("502")), retry_first=3600)
        await outbox.send(HERE, "kept one", kind="answer")
        await outbox.shutdown()
    adapter = FakeAdapter()
    await restart(path, adapter, 1)
    await restart(path, adapter, 1)
    assert adapter.texts() == [f"{EARLIER_REPLY}\n\nkept one"]


async def test_a_start_leaves_rows_of_its_own_process_alone(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    adapter = FakeAdapter()
    async with opened(path) as store:
        outbox = outbox_over(store, adapter)
        started_at = datetime.now(UTC)
        await outbox.send(HERE, "live", kind="answer")
        report = await resume_outbox(outbox, ["atlas"], started_at=started_at)
    assert report.queued == report.maybe == []
    assert adapter.texts() == ["live"]


async def test_rows_older_than_a_day_are_not_sent_at_a_start(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with opened(path) as store:
        await stored_answer(store, "old answer")
    adapter = FakeAdapter()
    async with opened(path) as store:
        outbox = outbox_over(store, adapter)
        report = await resume_outbox(
            outbox,
            ["atlas"],
            started_at=datetime.now(UTC) + timedelta(days=2),
            now=datetime.now(UTC) + timedelta(days=2),
        )
    assert len(report.dropped) == 1 and adapter.texts() == []
    assert states(path)[0][1] == "failed"


async def test_answers_the_old_bookkeeping_owed_become_rows(tmp_path: Path) -> None:
    """A file from before the outbox: an answer never sent, one caught while sending, one
    delivered. The migration makes the first two rows; the next start sends one, tells one."""
    from atlas.store.conversation_schema import MIGRATIONS
    from atlas.store.message_index import index_pending_messages

    path = tmp_path / "c.db"
    old = Database(path, MIGRATIONS[:8], upkeep=index_pending_messages)
    await old.open()

    def fill(db) -> None:
        now = datetime.now(UTC).isoformat()
        db.execute(
            "INSERT INTO conversations (id, bot, channel, chat, thread, user, kind, "
            "created_at, updated_at) VALUES (1, 'atlas', ?, '42', '', '', 'conversation', ?, ?)",
            [CHANNEL, now, now],
        )
        for content, sending, delivered in (
            ("never sent", None, None),
            ("caught", now, None),
            ("arrived", now, now),
        ):
            db.execute(
                "INSERT INTO messages (conversation_id, role, content, kind, answers_upto, "
                "sending_at, delivered_at, created_at) VALUES (1, 'assistant', ?, 'message', "
                "1, ?, ?, ?)",
                [content, sending, delivered, now],
            )

    await old.call(fill)
    await old.close()
    assert_states = [("answer", "pending", "never sent"), ("answer", "sending", "caught")]
    async with opened(path):
        pass
    assert states(path) == assert_states
    adapter = FakeAdapter()
    await restart(path, adapter, 2)
    assert sorted(adapter.texts()) == sorted(["never sent", RESTARTED_WHILE_SENDING])


async def test_rows_of_every_state_from_before_011_resume_as_they_did(tmp_path: Path) -> None:
    """Migration 011 finds open rows by `settled_at IS NULL`, not by state: rows written
    before it, in every state, are resumed exactly as the state said."""
    from atlas.outbox.rows import (
        insert_row,
        mark_delivered,
        mark_failed,
        mark_kept,
        mark_sending,
        mark_unsure,
        open_rows,
    )
    from atlas.store.conversation_schema import MIGRATIONS

    path = tmp_path / "c.db"
    async with Database(path, MIGRATIONS[:10]) as old:

        def fill(db) -> None:
            ids = {state: insert_row(db, HERE, "note", state) for state in ("pending", "sending")}
            ids |= {s: insert_row(db, HERE, "note", s) for s in ("kept", "delivered", "failed")}
            ids["maybe"] = insert_row(db, HERE, "note", "maybe")
            for state in ("sending", "delivered", "failed", "maybe"):
                mark_sending(db, ids[state])
            mark_kept(db, [ids["kept"]], "an outage")
            mark_delivered(db, ids["delivered"], "m1")
            mark_failed(db, ids["failed"], "refused")
            mark_unsure(db, ids["maybe"], "cut")

        await old.call(fill)
    async with opened(path) as store:
        later = datetime.now(UTC) + timedelta(seconds=1)
        found = await store.db.call(lambda db: open_rows(db, "atlas", before=later.isoformat()))
    assert [(row.text, row.state) for row in found] == [
        ("pending", "pending"),
        ("sending", "sending"),
        ("kept", "kept"),
    ]


async def test_a_report_and_then_its_note_caught_tell_again_with_the_same_note(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    for step in range(2):  # the report caught at a kill, then the note about it at the next
        adapter = FakeAdapter()
        adapter.hold = asyncio.Event()
        async with opened(path) as store:
            outbox = outbox_over(store, adapter)
            if step == 0:
                outbox.queue([])
                await outbox.enqueue(HERE, "the report", kind="report", key="routine-run:5:daily")
            else:
                await resume_outbox(outbox, ["atlas"], started_at=datetime.now(UTC) + timedelta(1))
            await adapter.entered.wait()
            await outbox.shutdown()
    later = FakeAdapter()
    await restart(path, later, 1)
    await restart(path, later, 1)
    [note] = later.texts()  # told once more, never the report again
    assert 'Routine "daily"' in note and "may not have reached you" in note
    assert [s[:2] for s in states(path)] == [
        ("report", "maybe"),
        ("notice", "maybe"),
        ("notice", "delivered"),
    ]
