"""The outbox's behaviours on both engines (atlas/outbox/engine.py): each bot's
conversations.db (the embedded default) and the home's PostgreSQL database. Then what only
PostgreSQL has to guarantee, with several senders on one database: a row claimed by exactly
one of them, and a sender whose lease epoch is stale marking and sending nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from atlas.channels.base import Address
from atlas.outbox.engine import OutboxRows, SqliteOutboxRows, StaleEpoch
from atlas.outbox.errors import MaybeDelivered, NeverRetry, RetryLater
from atlas.outbox.notes import RESTARTED_WHILE_SENDING
from atlas.outbox.resume import resume_outbox
from atlas.outbox.rows import Outgoing
from atlas.outbox.sender import Outbox
from atlas.providers.base import Message
from atlas.store.conversations import ConversationStore
from atlas.store.db import Database
from atlas.store.pg.conversations import PgConversationStore
from atlas.store.pg.outbox import PgOutboxRows, written_with
from atlas.store.pg.server import PgServer

CHANNEL = "fake:atlas"
HERE = Address("atlas", CHANNEL, "42")


class FakeAdapter:
    """Each send takes the next scripted outcome (an exception to raise, or None to succeed)."""

    name = CHANNEL

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.sent: list[tuple[Address, str]] = []

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> str:
        await asyncio.sleep(0)  # a real send yields: another sender may run meanwhile
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        self.sent.append((address, text))
        return f"m{len(self.sent)}"

    def texts(self) -> list[str]:
        return [text for _, text in self.sent]


@dataclass
class Engine:
    """One engine's conversations and outbox rows, and how to make a sender over them."""

    name: str
    store: Any  # ConversationStore | PgConversationStore
    rows: OutboxRows
    database: Any  # what Outbox's `database` opens (the SQLite file; unused on PostgreSQL)

    def outbox(self, adapter: FakeAdapter, **options: Any) -> Outbox:
        return Outbox({CHANNEL: adapter}, self.database, rows=self.rows, **options)

    def also(self, outgoing: Outgoing) -> Any:
        return outgoing if self.name == "sqlite" else written_with(outgoing)

    async def states(self) -> list[tuple[str, str, str]]:
        """Every row's kind, state and text, oldest first, read from the engine's table."""
        sql = "SELECT kind, state, text FROM outbox ORDER BY id"
        if self.name == "sqlite":
            found = await self.store.db.quick(lambda db: db.execute(sql).fetchall())
        else:
            found = await self.store.server.pool.fetch(sql)
        return [tuple(row) for row in found]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store = ConversationStore(tmp_path / "c.db")
        await store.open()

        async def database(bot: str) -> Database:
            return store.db

        try:
            yield Engine("sqlite", store, SqliteOutboxRows(database), database)
        finally:
            await store.close()
        return
    async with PgServer(request.getfixturevalue("postgres_url")) as server:

        async def no_database(bot: str) -> Database:
            raise AssertionError("the PostgreSQL outbox opens no SQLite file")

        yield Engine(
            "postgres", PgConversationStore(server, "atlas"), PgOutboxRows(server), no_database
        )


async def stored_answer(engine: Engine, text: str, notes: tuple[str, ...] = ()):
    conversation = await engine.store.conversation(CHANNEL, HERE.chat, bot="atlas")
    asked = await engine.store.append(conversation.id, Message("user", "hello"))
    outgoing = Outgoing(HERE, text, notes=notes)
    answer_id = await engine.store.append(
        conversation.id, Message("assistant", text), answers_upto=asked, also=engine.also(outgoing)
    )
    return conversation.id, answer_id, outgoing.rows


def test_both_are_outbox_rows() -> None:
    async def database(bot: str) -> Database:
        raise AssertionError

    assert isinstance(SqliteOutboxRows(database), OutboxRows)
    assert isinstance(PgOutboxRows(PgServer("postgresql://x@127.0.0.1/x")), OutboxRows)


async def test_an_answer_and_its_rows_are_stored_together_and_delivered(engine: Engine) -> None:
    adapter = FakeAdapter()
    _, answer_id, rows = await stored_answer(engine, "the answer", notes=("(a note)",))
    assert [(r.kind, r.state) for r in rows] == [("note", "pending"), ("answer", "pending")]
    assert rows[1].message_id == answer_id
    deliveries = await engine.outbox(adapter).deliver(rows)
    assert [(d.state, d.platform_id) for d in deliveries] == [
        ("delivered", "m1"),
        ("delivered", "m2"),
    ]
    assert adapter.texts() == ["(a note)", "the answer"]
    assert await engine.states() == [
        ("note", "delivered", "(a note)"),
        ("answer", "delivered", "the answer"),
    ]


async def test_an_append_that_fails_writes_no_row(engine: Engine) -> None:
    with pytest.raises(Exception, match="no conversation"):
        await engine.store.append(
            999, Message("assistant", "x"), also=engine.also(Outgoing(HERE, "x"))
        )
    assert await engine.states() == []


async def test_a_claimed_row_is_sending_and_a_key_makes_one_row(engine: Engine) -> None:
    first = await engine.rows.add(HERE, "report", "daily", key="run:7")
    again = await engine.rows.add(HERE, "report", "daily", key="run:7")
    assert again.id == first.id and first.state == "pending"
    assert await engine.rows.claim("atlas", first.id, epoch=0)
    claimed = await engine.rows.get("atlas", first.id)
    assert claimed is not None and (claimed.state, claimed.attempts) == ("sending", 1)


async def test_refused_fails_and_an_outage_keeps_then_sends_once(engine: Engine) -> None:
    adapter = FakeAdapter(NeverRetry("blocked"), RetryLater("502"))
    outbox = engine.outbox(adapter, retry_first=0.01)
    refused = await outbox.send(HERE, "one", kind="note")
    assert (refused.state, refused.error) == ("failed", "blocked")
    kept = await outbox.send(HERE, "two", kind="note")
    assert kept.state == "kept"
    # A new row to the address tries the kept one at once, ahead of it.
    assert (await outbox.send(HERE, "three", kind="note")).state == "delivered"
    await outbox.shutdown()
    assert adapter.texts() == ["two", "three"]
    assert await engine.states() == [
        ("note", "failed", "one"),
        ("note", "delivered", "two"),
        ("note", "delivered", "three"),
    ]


async def test_maybe_delivered_is_never_resent_and_told_once(engine: Engine) -> None:
    adapter = FakeAdapter(MaybeDelivered("timed out"))
    _, _, rows = await stored_answer(engine, "the answer")
    outbox = engine.outbox(adapter)
    [delivery] = await outbox.deliver(rows)
    await outbox.drained()
    assert delivery.state == "maybe"
    states = await engine.states()
    assert states[0] == ("answer", "maybe", "the answer")
    assert [(kind, state) for kind, state, _ in states[1:]] == [("notice", "delivered")]
    assert len(adapter.sent) == 1  # the note only


async def test_a_posted_question_is_marked_by_how_it_went(engine: Engine) -> None:
    outbox = engine.outbox(FakeAdapter())
    async with outbox.posting(HERE, "allow it?") as posted:
        posted.platform_id = "q1"
    with contextlib.suppress(MaybeDelivered):
        async with outbox.posting(HERE, "and this?"):
            raise MaybeDelivered("no answer")
    assert await engine.states() == [
        ("question", "delivered", "allow it?"),
        ("question", "maybe", "and this?"),
    ]


async def test_resume_after_a_restart_sends_pending_and_tells_about_sending(
    engine: Engine,
) -> None:
    _, _, [caught] = await stored_answer(engine, "caught mid-send")
    assert await engine.rows.claim("atlas", caught.id, epoch=0)  # then the process died
    waiting = await engine.rows.add(HERE, "note", "still pending")
    later = datetime.now(UTC) + timedelta(seconds=1)
    adapter = FakeAdapter()
    outbox = engine.outbox(adapter)  # the next process
    report = await resume_outbox(outbox, ["atlas"], started_at=later)
    await outbox.drained()
    assert [r.id for r in report.maybe] == [caught.id]
    assert [r.id for r in report.queued] == [waiting.id]
    # The pending row and the note about the caught row, oldest first; the caught row itself
    # is never sent again.
    assert adapter.texts() == ["still pending", RESTARTED_WHILE_SENDING]
    states = await engine.states()
    assert states[0][:2] == ("answer", "maybe")
    assert ("note", "delivered", "still pending") in states
    assert sum(kind == "notice" and state == "delivered" for kind, state, _ in states) == 1


# ------------------------------------------------------------ PostgreSQL: several senders


@contextlib.asynccontextmanager
async def two_servers(url: str) -> AsyncIterator[tuple[PgServer, PgServer]]:
    """Two pools on one database, as two processes (or machines) would have."""
    async with PgServer(url) as one, PgServer(url) as two:
        yield one, two


@pytest.mark.postgres
async def test_two_claimers_racing_never_get_the_same_row(postgres_url: str) -> None:
    async with two_servers(postgres_url) as (one, two):
        rows_one, rows_two = PgOutboxRows(one), PgOutboxRows(two)
        made = [(await rows_one.add(HERE, "note", f"row {n}")).id for n in range(200)]

        async def drain(rows: PgOutboxRows) -> list[int]:
            got: list[int] = []
            while batch := await rows.claim_batch("atlas", epoch=3, limit=7):
                got.extend(row.id for row in batch)
            return got

        first, second = await asyncio.gather(drain(rows_one), drain(rows_two))
    assert not set(first) & set(second)
    assert sorted(first + second) == made
    assert first and second  # both took part


@pytest.mark.postgres
async def test_two_senders_given_the_same_rows_send_each_once(postgres_url: str) -> None:
    async with two_servers(postgres_url) as (one, two):
        rows_one = PgOutboxRows(one)
        made = [await rows_one.add(HERE, "note", f"row {n}") for n in range(30)]
        adapters = FakeAdapter(), FakeAdapter()

        async def no_database(bot: str) -> Database:
            raise AssertionError

        senders = [
            Outbox({CHANNEL: adapter}, no_database, rows=PgOutboxRows(server), epoch=5)
            for adapter, server in zip(adapters, (one, two), strict=True)
        ]
        for sender in senders:  # as two processes resuming the same rows would
            sender.queue(list(made))
        await asyncio.gather(*(sender.drained() for sender in senders))
        for sender in senders:
            await sender.shutdown()
        stored = [await rows_one.get("atlas", row.id) for row in made]
    sent = adapters[0].texts() + adapters[1].texts()
    assert sorted(sent) == sorted(row.text for row in made)  # each once, none twice
    assert all(row is not None and row.state == "delivered" for row in stored)


@pytest.mark.postgres
async def test_a_stale_epoch_cannot_mark_delivered_nor_send(postgres_url: str) -> None:
    async with two_servers(postgres_url) as (one, two):
        old, new = PgOutboxRows(one), PgOutboxRows(two)
        row = await old.add(HERE, "answer", "in flight")
        assert await old.claim("atlas", row.id, epoch=1)  # then the old owner pauses
        other = await new.add(HERE, "note", "the new owner's")
        # The new owner takes the bot over: its start settles what the old one left sending.
        await new.maybe(row, "taken over while sending", None, epoch=2)
        with pytest.raises(StaleEpoch, match="epoch 1 is stale"):
            await old.delivered("atlas", row.id, "m1", epoch=1)
        with pytest.raises(StaleEpoch, match="epoch 1 is stale"):
            await old.claim("atlas", other.id, epoch=1)  # nor claims what is left
        assert await new.claim("atlas", other.id, epoch=2)
        await new.delivered("atlas", other.id, "m9", epoch=2)

        # A stale sender's queue sends nothing and says why.
        adapter = FakeAdapter()

        async def no_database(bot: str) -> Database:
            raise AssertionError

        stale = Outbox({CHANNEL: adapter}, no_database, rows=old, epoch=lambda bot: 1)
        with pytest.raises(StaleEpoch):
            await stale.send(HERE, "from the old owner", kind="note")
        await stale.shutdown()
        assert adapter.sent == []
        settled = await new.get("atlas", row.id)
        assert settled is not None and settled.state == "maybe"
        with pytest.raises(StaleEpoch):
            await old.add_sending(HERE, "question", "too late", epoch=1)


@pytest.mark.postgres
async def test_a_row_claimed_by_a_newer_epoch_is_not_the_old_senders(postgres_url: str) -> None:
    async with PgServer(postgres_url) as server:
        rows = PgOutboxRows(server)
        row = await rows.add(HERE, "note", "kept once")
        assert await rows.claim("atlas", row.id, epoch=4)
        await rows.kept("atlas", [row.id], "502", epoch=4)
        assert await rows.claim("atlas", row.id, epoch=4)  # kept: claimed again
        assert not await rows.claim("atlas", row.id, epoch=4)  # sending: nobody else gets it
        await rows.delivered("atlas", row.id, "m1", epoch=4)
        with pytest.raises(StaleEpoch, match="settled"):
            await rows.failed("atlas", row.id, "late", epoch=4)


@pytest.mark.postgres
async def test_an_outage_keeps_the_rows_behind_but_not_another_senders(postgres_url: str) -> None:
    async with two_servers(postgres_url) as (one, two):
        mine, theirs = PgOutboxRows(one), PgOutboxRows(two)
        tried, behind, in_flight = [await mine.add(HERE, "note", text) for text in "abc"]
        assert await mine.claim("atlas", tried.id, epoch=1)
        assert await theirs.claim("atlas", in_flight.id, epoch=1)  # serving the same address
        await mine.kept("atlas", [tried.id, behind.id, in_flight.id], "502", epoch=1)
        states = [(await mine.get("atlas", row.id)).state for row in (tried, behind, in_flight)]  # type: ignore[union-attr]
    assert states == ["kept", "kept", "sending"]
