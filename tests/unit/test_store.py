"""The SQLite store: migrations, the writer thread, conversations, messages and FTS5 search."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path

import pytest
import sqlite_utils

from atlas.errors import AtlasError
from atlas.providers.base import Image, Message, ToolCall, Usage
from atlas.store import db as store_db
from atlas.store.conversations import (
    MIGRATIONS,
    ConversationStore,
    MessageFilter,
    TextQuery,
    fts_query,
    has_cjk,
)
from atlas.store.db import CHECKPOINT_EVERY, Database, Migration
from atlas.store.history_cache import MESSAGE_OVERHEAD_BYTES, HistoryCache, Known, Read
from atlas.store.message_index import INDEXES, index_pending_messages


def _create_notes(db: sqlite_utils.Database) -> None:
    db["notes"].create({"id": int, "text": str}, pk="id")


NOTES: list[Migration] = [("001_notes", _create_notes)]


def _applied(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT name, applied_at FROM _migrations ORDER BY rowid").fetchall()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    async with ConversationStore(tmp_path / "bots" / "atlas" / "conversations.db") as opened:
        yield opened


async def _chat(store: ConversationStore, chat: str = "c1", **key: str) -> int:
    return (await store.conversation("telegram", chat, bot="atlas", **key)).id


# --- Database -------------------------------------------------------------------------------


async def test_migrations_recorded_once_and_skipped_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    async with ConversationStore(path):
        pass
    first = _applied(path)
    assert [name for name, _ in first] == [name for name, _ in MIGRATIONS]
    for _, applied_at in first:
        assert datetime.fromisoformat(applied_at).utcoffset().total_seconds() == 0

    async with ConversationStore(path) as store:  # a second run must not re-create tables
        conversation_id = await _chat(store)
        assert await store.append(conversation_id, Message("user", "hi")) is not None
    assert _applied(path) == first


async def test_new_migrations_applied_on_top_of_old_ones(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with Database(path, NOTES):
        pass

    def add_column(db: sqlite_utils.Database) -> None:
        db["notes"].add_column("tag", str)

    async with Database(path, [*NOTES, ("002_tag", add_column)]) as db:
        columns = await db.call(lambda d: set(d["notes"].columns_dict))
    assert columns == {"id", "text", "tag"}
    assert [name for name, _ in _applied(path)] == ["001_notes", "002_tag"]


async def test_unknown_migration_means_newer_atlas(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with Database(path, NOTES):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO _migrations VALUES ('099_from_the_future', '2030-01-01')")
    database = Database(path, NOTES)
    with pytest.raises(AtlasError, match=r"099_from_the_future.*newer Atlas"):
        await database.open()
    assert not database.is_open


async def test_failed_migration_is_rolled_back_and_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "x.db"

    def half_then_fail(db: sqlite_utils.Database) -> None:
        db["half"].create({"id": int}, pk="id")
        db.execute("INSERT INTO missing_table VALUES (1)")

    with pytest.raises(AtlasError, match="002_broken"):
        await Database(path, [*NOTES, ("002_broken", half_then_fail)]).open()
    assert [name for name, _ in _applied(path)] == ["001_notes"]
    assert not sqlite_utils.Database(path)["half"].exists()


async def test_wal_synchronous_and_foreign_keys(tmp_path: Path) -> None:
    async with Database(tmp_path / "x.db", NOTES) as db:
        pragmas = await db.call(
            lambda d: [
                d.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            ]
        )
    assert pragmas[0] == "wal"
    assert pragmas[1] == 1  # NORMAL
    assert pragmas[2] == 1
    assert pragmas[3] > 0


async def test_call_before_open_and_after_close_is_an_error(tmp_path: Path) -> None:
    db = Database(tmp_path / "x.db", NOTES)
    with pytest.raises(AtlasError, match="not open"):
        await db.call(lambda d: 1)
    await db.open()
    assert await db.call(lambda d: 41 + 1) == 42
    await db.close()
    with pytest.raises(AtlasError, match="closed"):
        await db.call(lambda d: 1)


async def test_write_survives_cancelled_caller(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    started = threading.Event()

    def slow_write(db: sqlite_utils.Database) -> None:
        started.set()
        threading.Event().wait(0.3)  # still writing when the caller is cancelled
        db["notes"].insert({"text": "kept"})

    db = Database(path, NOTES)
    await db.open()
    # A second write queued behind the first one must not be dropped either.
    running = asyncio.create_task(db.call(slow_write))
    queued = asyncio.create_task(db.call(lambda d: d["notes"].insert({"text": "queued"})))
    await asyncio.to_thread(started.wait, 5)
    running.cancel()
    queued.cancel()
    for task in (running, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    await db.close()  # waits for the work the cancelled callers left behind
    texts = [row["text"] for row in sqlite_utils.Database(path)["notes"].rows]
    assert texts == ["kept", "queued"]


async def test_failure_after_cancelled_caller_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started = threading.Event()

    def slow_failing_write(db: sqlite_utils.Database) -> None:
        started.set()
        threading.Event().wait(0.1)
        db.execute("INSERT INTO no_such_table VALUES (1)")

    async with Database(tmp_path / "x.db", NOTES) as db:
        task = asyncio.create_task(db.call(slow_failing_write))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.sleep(0)  # let the done-callback run
    assert "nobody waiting for it" in caplog.text
    assert "no_such_table" in caplog.text


async def test_calls_run_on_one_thread(tmp_path: Path) -> None:
    async with Database(tmp_path / "x.db", NOTES) as db:
        threads = await asyncio.gather(
            *(db.call(lambda d: threading.get_ident()) for _ in range(20))
        )
    assert len(set(threads)) == 1
    assert threads[0] != threading.get_ident()


async def test_calls_made_together_run_in_order_each_with_its_own_outcome(
    tmp_path: Path,
) -> None:
    seen: list[int] = []

    def record(n: int) -> Callable[[sqlite_utils.Database], int]:
        def fn(db: sqlite_utils.Database) -> int:
            if n == 2:
                raise ValueError("the second fails alone")
            seen.append(n)
            return n * 10

        return fn

    async with Database(tmp_path / "x.db", NOTES) as db:
        # Made in one turn of the loop, they cross to the writer thread as one job.
        outcomes = await asyncio.gather(
            *(db.call(record(n)) for n in range(1, 5)), return_exceptions=True
        )
        assert outcomes[0] == 10 and outcomes[2:] == [30, 40]
        assert isinstance(outcomes[1], ValueError)
        assert seen == [1, 3, 4]
        # Calls still waiting for their turn of the loop when the store closes run first.
        late = asyncio.create_task(db.call(lambda d: d["notes"].insert({"text": "late"})))
        await asyncio.sleep(0)  # the task has made its call; the job is not handed over yet
    await late
    assert [r["text"] for r in sqlite_utils.Database(tmp_path / "x.db")["notes"].rows] == ["late"]


async def test_quick_runs_on_the_loop_when_the_thread_is_idle(tmp_path: Path) -> None:
    async with Database(tmp_path / "x.db", NOTES) as db:
        assert await db.quick(lambda d: threading.get_ident()) == threading.get_ident()
        await db.quick(lambda d: d["notes"].insert({"text": "inline"}))
        # The thread's own connection sees the committed write.
        assert await db.call(lambda d: [r["text"] for r in d["notes"].rows]) == ["inline"]


async def test_quick_waits_behind_thread_work_and_keeps_order(tmp_path: Path) -> None:
    started = threading.Event()
    order: list[str] = []

    def slow(db: sqlite_utils.Database) -> None:
        started.set()
        threading.Event().wait(0.2)
        order.append("slow")

    async with Database(tmp_path / "x.db", NOTES) as db:
        running = asyncio.create_task(db.call(slow))
        await asyncio.to_thread(started.wait, 5)
        # The thread has the connection: a quick call must not touch it meanwhile.
        where = await db.quick(lambda d: order.append("quick") or threading.get_ident())
        await running
    assert order == ["slow", "quick"]
    assert where != threading.get_ident()


async def test_quick_call_on_a_file_locked_elsewhere_waits_on_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with Database(path, NOTES) as db:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        loop_thread = threading.get_ident()
        ran_on: list[int] = []

        def insert(d: sqlite_utils.Database) -> None:
            ran_on.append(threading.get_ident())
            d.execute("INSERT INTO notes (text) VALUES ('after the lock')")

        task = asyncio.create_task(db.quick(insert))
        await asyncio.sleep(0.2)
        assert not task.done()  # the loop kept running while the call waited for the lock
        other.execute("COMMIT")
        other.close()
        await task
        rows = await db.quick(lambda d: [r["text"] for r in d["notes"].rows])
    assert rows == ["after the lock"]
    assert ran_on[0] == loop_thread and ran_on[-1] != loop_thread


async def test_checkpoints_run_on_the_thread_not_in_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoints: list[tuple[int, int]] = []  # (thread, WAL frames copied)

    def checkpoint(d: sqlite_utils.Database) -> None:
        _, _, copied = d.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        checkpoints.append((threading.get_ident(), copied))

    monkeypatch.setattr(store_db, "_checkpoint", checkpoint)
    path = tmp_path / "x.db"
    async with Database(path, NOTES) as db:
        assert await db.quick(lambda d: d.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
        for n in range(2 * CHECKPOINT_EVERY):
            await db.quick(lambda d, n=n: d["notes"].insert({"text": f"note {n}"}))
    assert len(checkpoints) == 2
    assert all(thread != threading.get_ident() and copied > 0 for thread, copied in checkpoints)
    assert sqlite_utils.Database(path)["notes"].count == 2 * CHECKPOINT_EVERY


def test_duplicate_migration_names_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="001_notes"):
        Database(tmp_path / "x.db", [*NOTES, *NOTES])


# --- Conversations ------------------------------------------------------------------------


async def test_conversation_get_or_create(store: ConversationStore) -> None:
    first = await store.conversation("slack", "C1", bot="atlas", title="Planning")
    again = await store.conversation("slack", "C1", bot="atlas")
    assert again == first
    assert first.thread == "" and first.user == "" and first.kind == "conversation"
    assert first.title == "Planning" and first.bot == "atlas"
    assert datetime.fromisoformat(first.created_at).utcoffset().total_seconds() == 0

    in_thread = await store.conversation("slack", "C1", thread="t1", bot="atlas")
    by_user = await store.conversation("slack", "C1", user="u1", bot="atlas")
    other_channel = await store.conversation("telegram", "C1", bot="atlas")
    ids = {first.id, in_thread.id, by_user.id, other_channel.id}
    assert len(ids) == 4
    assert (await store.conversation("slack", "C1", thread="t1", bot="atlas")).id == in_thread.id

    routine = await store.conversation("routine", "daily", kind="routine", bot="atlas")
    assert routine.kind == "routine"
    assert await store.get_conversation(routine.id) == routine
    assert await store.get_conversation(9999) is None


async def test_unknown_kinds_rejected(store: ConversationStore) -> None:
    with pytest.raises(ValueError, match="conversation kind"):
        await store.conversation("slack", "C1", bot="atlas", kind="chat")  # type: ignore[arg-type]
    conversation_id = await _chat(store)
    with pytest.raises(ValueError, match="message kind"):
        await store.append(conversation_id, Message("user", "x"), kind="note")  # type: ignore[arg-type]


async def test_append_and_history_round_trip(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    messages = [
        Message("user", "what is on this picture?", images=[Image("image/png", "aGVsbG8=")]),
        Message(
            "assistant",
            "",
            tool_calls=[
                ToolCall("call_1", "read_file", '{"path": "a.txt"}'),
                ToolCall("call_2", "web_search", "{not json"),
            ],
        ),
        Message("tool", "contents of a", tool_call_id="call_1", name="read_file"),
        Message("tool", "Error: bad arguments", tool_call_id="call_2", name="web_search"),
        Message("assistant", "A cat. ✨ «ok»"),
    ]
    ids = [await store.append(conversation_id, m) for m in messages]
    assert all(isinstance(i, int) for i in ids) and ids == sorted(ids)
    assert await store.history(conversation_id) == messages
    assert await store.history(await _chat(store, "other")) == []


async def test_append_bumps_updated_at(store: ConversationStore) -> None:
    before = await store.conversation("telegram", "c1", bot="atlas")
    await asyncio.sleep(0.001)
    await store.append(before.id, Message("user", "hi"))
    after = await store.get_conversation(before.id)
    assert after is not None
    assert after.updated_at > before.updated_at
    assert after.created_at == before.created_at
    # In a transaction too (an answer with its outbox rows, a message checked against newer
    # ones): the trigger of migration 012 moves it with the INSERT.
    await asyncio.sleep(0.001)
    await store.append(before.id, Message("user", "again"), unless_user_after=10**9)
    again = await store.get_conversation(before.id)
    assert again is not None and again.updated_at > after.updated_at
    newest = await store.newest_user_message_id(before.id)
    assert await store.append(before.id, Message("user", "no"), unless_user_after=0) is None
    assert await store.newest_user_message_id(before.id) == newest
    unchanged = await store.get_conversation(before.id)
    assert unchanged is not None and unchanged.updated_at == again.updated_at


async def test_append_to_missing_conversation(store: ConversationStore) -> None:
    with pytest.raises(AtlasError, match="no conversation with id 404"):
        await store.append(404, Message("user", "hi"))


async def test_duplicate_event_id_is_stored_once(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    other_id = await _chat(store, "c2")
    first = await store.append(conversation_id, Message("user", "hello"), event_id="evt-1")
    assert first is not None
    assert await store.append(conversation_id, Message("user", "hello"), event_id="evt-1") is None
    # Stored once per bot: a retried event never lands in another conversation (after `!new`).
    assert await store.append(other_id, Message("user", "hello"), event_id="evt-1") is None
    # Messages without an event id never collide.
    assert await store.append(conversation_id, Message("assistant", "a")) is not None
    assert await store.append(conversation_id, Message("assistant", "a")) is not None
    assert [m.content for m in await store.history(conversation_id)] == ["hello", "a", "a"]


async def test_concurrent_appends_all_land(store: ConversationStore) -> None:
    conversation_ids = [await _chat(store, f"c{i}") for i in range(4)]
    results = await asyncio.gather(
        *(
            store.append(conversation_ids[n % 4], Message("user", f"message {n}"), event_id=str(n))
            for n in range(100)
        )
    )
    assert None not in results and len(set(results)) == 100
    stored = [m.content for cid in conversation_ids for m in await store.history(cid)]
    assert sorted(stored) == sorted(f"message {n}" for n in range(100))


async def test_usage_totals(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    await store.append(conversation_id, Message("user", "hi"))
    await store.append(
        conversation_id,
        Message("assistant", "one"),
        usage=Usage(input_tokens=100, output_tokens=10, cache_read_tokens=5),
        model="fake/test-model",
    )
    await store.append(
        conversation_id,
        Message("assistant", "two"),
        usage=Usage(input_tokens=50, output_tokens=7, cache_write_tokens=3),
    )
    other_id = await _chat(store, "other")
    await store.append(other_id, Message("assistant", "x"), usage=Usage(input_tokens=1000))
    assert await store.usage_totals(conversation_id) == Usage(150, 17, 5, 3)
    assert await store.usage_totals(await _chat(store, "empty")) == Usage()


# --- Search -------------------------------------------------------------------------------


async def test_search_stems_and_ignores_diacritics(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    run_id = await store.append(conversation_id, Message("user", "I like to run in the park"))
    cafe_id = await store.append(conversation_id, Message("assistant", "Meet me at the café"))
    await store.append(conversation_id, Message("user", "nothing relevant here"))

    hits = await store.search("running")
    assert [h.message_id for h in hits] == [run_id]
    assert hits[0].conversation_id == conversation_id and hits[0].role == "user"
    assert "**run**" in hits[0].snippet
    assert datetime.fromisoformat(hits[0].created_at).utcoffset().total_seconds() == 0

    assert [h.message_id for h in await store.search("cafe")] == [cafe_id]
    assert [h.message_id for h in await store.search("CAFÉ meet")] == [cafe_id]
    assert await store.search("cafe park") == []  # every word must match


async def test_search_ranks_by_bm25_and_limits(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    weak = await store.append(conversation_id, Message("user", "deploy " + "filler " * 40))
    strong = await store.append(conversation_id, Message("user", "deploy deploy deploy"))
    assert [h.message_id for h in await store.search("deploy")] == [strong, weak]
    assert [h.message_id for h in await store.search("deploy", limit=1)] == [strong]
    assert await store.search("deploy", limit=0) == []


async def test_search_within_one_conversation(store: ConversationStore) -> None:
    mine = await _chat(store, "mine")
    theirs = await _chat(store, "theirs")
    mine_msg = await store.append(mine, Message("user", "the invoice is due"))
    theirs_msg = await store.append(theirs, Message("user", "another invoice"))
    assert {h.message_id for h in await store.search("invoice")} == {mine_msg, theirs_msg}
    assert [h.message_id for h in await store.search("invoice", conversation_id=mine)] == [mine_msg]


@pytest.mark.parametrize(
    "query",
    ["c++", "what's", '"', '"unbalanced', "AND OR NOT", "*", "NEAR(", "a:b", "-x", "^", "", "  "],
)
async def test_tricky_queries_never_raise(store: ConversationStore, query: str) -> None:
    conversation_id = await _chat(store)
    await store.append(conversation_id, Message("user", "what's new in c++ and rust"))
    hits = await store.search(query)
    assert isinstance(hits, list)
    if not query.strip() or query in ('"', "*", "^"):
        assert hits == []


async def test_tricky_queries_still_find_text(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    message_id = await store.append(conversation_id, Message("user", "what's new in c++ and rust"))
    for query in ("c++", "what's", "AND", '"rust', "rust*"):
        assert [h.message_id for h in await store.search(query)] == [message_id], query


def test_fts_query_quotes_each_term() -> None:
    assert fts_query('say "hi" c++') == '"say" AND """hi""" AND "c++"'
    assert fts_query('* ^ "') is None
    assert fts_query("") is None


# --- Trigram index (004) ----------------------------------------------------------------------


def _trigram_ids(path: Path, text: str) -> list[int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH ? ORDER BY rowid",
            [f'"{text}"'],
        ).fetchall()
    return [row[0] for row in rows]


async def _old_store_with_a_message(path: Path, migrations: list[Migration], text: str) -> None:
    """A store written by an older Atlas (only `migrations`): one conversation, one message."""
    async with Database(path, migrations) as db:

        def fill(d: sqlite_utils.Database) -> None:
            d.execute(
                "INSERT INTO conversations (bot, channel, chat, created_at, updated_at) "
                "VALUES ('atlas', 'telegram', 'c1', '2024-01-01', '2024-01-01')"
            )
            d.execute(
                "INSERT INTO messages (conversation_id, role, content, created_at) "
                "VALUES (1, 'user', ?, '2024-01-01')",
                [text],
            )

        await db.call(fill)


async def test_trigram_migration_indexes_messages_already_stored(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    await _old_store_with_a_message(path, MIGRATIONS[:3], "明日は東京タワーで会議")  # before 004
    async with ConversationStore(path) as store:
        assert "004_messages_trigram" in [name for name, _ in _applied(path)]
        assert _trigram_ids(path, "東京タワー") == [1]
        later = await store.append(1, Message("assistant", "タワーの会議は三時です"))
        await store.db.call(index_pending_messages)
        assert _trigram_ids(path, "タワー") == [1, later]


async def test_trigram_index_follows_updates_and_deletes(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    message_id = await store.append(conversation_id, Message("user", "北京的天气很好"))
    await store.db.call(index_pending_messages)
    assert _trigram_ids(store.path, "天气很") == [message_id]

    def edit(db: sqlite_utils.Database) -> None:
        db.execute("UPDATE messages SET content = '上海下雨了' WHERE id = ?", [message_id])

    await store.db.call(edit)
    assert _trigram_ids(store.path, "天气很") == []
    assert _trigram_ids(store.path, "上海下") == [message_id]
    await store.db.call(lambda db: db.execute("DELETE FROM messages WHERE id = ?", [message_id]))
    assert _trigram_ids(store.path, "上海下") == []
    # The index holds nothing that the messages table does not.
    await store.db.call(
        lambda db: db.execute(
            "INSERT INTO messages_trigram (messages_trigram) VALUES ('integrity-check')"
        )
    )


# --- Indexing behind the writes (008) -------------------------------------------------------


def _indexed_ids(path: Path, table: str) -> list[int]:
    # Not `SELECT rowid FROM {table}`: an external-content index reads that from messages.
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute(f"SELECT id FROM {table}_docsize ORDER BY id")]


def _check_indexes(db: sqlite_utils.Database) -> None:
    """FTS5's own check: each index holds exactly what the messages table does (rank 1)."""
    for table in INDEXES:
        db.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")


async def test_a_search_sees_a_message_stored_a_moment_before(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    first = await store.append(conversation_id, Message("user", "the heron flew over the lake"))
    assert _indexed_ids(store.path, "messages_fts") == []  # stored, not yet indexed
    assert [hit.message_id for hit in await store.search("heron")] == [first]
    second = await store.append(conversation_id, Message("assistant", "herons fish at dawn"))
    assert {hit.message_id for hit in await store.search("heron")} == {first, second}
    for table in INDEXES:
        assert _indexed_ids(store.path, table) == [first, second]
    await store.db.call(_check_indexes)


async def test_a_search_goes_on_when_the_file_cannot_be_indexed(
    store: ConversationStore, caplog: pytest.LogCaptureFixture
) -> None:
    conversation_id = await _chat(store)
    older = await store.append(conversation_id, Message("user", "an osprey at noon"))
    assert [hit.message_id for hit in await store.search("osprey")] == [older]
    await store.append(conversation_id, Message("user", "an osprey at dusk"))
    store.db.busy_timeout = 0.05
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        hits = await store.search("osprey")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert [hit.message_id for hit in hits] == [older]  # what was indexed, not an error
    assert "could not index the newest messages" in caplog.text
    assert len(await store.search("osprey")) == 2  # the next search catches up


async def test_indexing_runs_behind_the_calls_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    async with ConversationStore(path) as store:
        conversation_id = await _chat(store)
        ids = [
            await store.append(conversation_id, Message("user", f"note {n}"))
            for n in range(store_db.UPKEEP_EVERY)
        ]
        await store.db.call(lambda db: None)  # behind the upkeep the calls queued
        indexed = _indexed_ids(path, "messages_fts")
        assert indexed and set(indexed) <= set(ids)  # the upkeep ran without a search
        last = await store.append(conversation_id, Message("user", "the last word"))
    for table in INDEXES:
        assert _indexed_ids(path, table) == [*ids, last]  # the close indexed the rest


async def test_a_crash_before_indexing_is_caught_up_at_open(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    async with ConversationStore(path) as store:
        conversation_id = await _chat(store)
    with sqlite3.connect(path) as conn:  # as a daemon killed before its upkeep left it
        conn.execute(
            "INSERT INTO messages (conversation_id, role, content, created_at) "
            "VALUES (?, 'user', 'stored before the crash', '2024-01-01')",
            [conversation_id],
        )
    assert _indexed_ids(path, "messages_fts") == []
    async with ConversationStore(path) as store:
        assert _indexed_ids(path, "messages_fts") == [1]
        await store.db.call(_check_indexes)


async def test_migration_keeps_what_was_indexed_without_doubling_it(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    await _old_store_with_a_message(path, MIGRATIONS[:7], "indexed by the old triggers")  # 008
    async with ConversationStore(path) as store:
        later = await store.append(1, Message("assistant", "indexed behind the writes"))
        assert {hit.message_id for hit in await store.search("indexed")} == {1, later}
        for table in INDEXES:
            assert _indexed_ids(path, table) == [1, later]
        await store.db.call(_check_indexes)


async def test_edits_and_deletes_of_stored_messages_keep_the_indexes_exact(
    store: ConversationStore,
) -> None:
    conversation_id = await _chat(store)
    indexed = await store.append(conversation_id, Message("user", "an indexed pelican"))
    await store.db.call(index_pending_messages)
    pending = await store.append(conversation_id, Message("user", "a pending pelican"))

    def edit_both(db: sqlite_utils.Database) -> None:
        db.execute("UPDATE messages SET content = 'an indexed cormorant' WHERE id = ?", [indexed])
        db.execute("UPDATE messages SET content = 'a pending cormorant' WHERE id = ?", [pending])

    await store.db.call(edit_both)
    assert await store.search("pelican") == []
    assert {hit.message_id for hit in await store.search("cormorant")} == {indexed, pending}
    await store.db.call(_check_indexes)
    # The newest message deleted once indexed: its id comes back, above the watermark (which
    # came down with the delete), so the next batch indexes it like any new message.
    await store.db.call(index_pending_messages)
    await store.db.call(lambda db: db.execute("DELETE FROM messages WHERE id = ?", [pending]))
    again = await store.append(conversation_id, Message("user", "a returning gannet"))
    assert again == pending
    assert pending not in _indexed_ids(store.path, "messages_fts")  # no trigger on insert
    assert [hit.message_id for hit in await store.search("gannet")] == [again]
    await store.db.call(_check_indexes)


async def test_migration_010_lowers_a_watermark_left_above_the_newest_message(
    tmp_path: Path,
) -> None:
    """A store whose newest indexed message was deleted before 010: the watermark stayed above
    every id, and the id given again was indexed by 008's insert trigger, which 010 drops."""
    path = tmp_path / "conversations.db"
    await _old_store_with_a_message(path, MIGRATIONS[:9], "an old tern")
    async with Database(path, MIGRATIONS[:9]) as old:

        def index_then_delete_the_newest(db: sqlite_utils.Database) -> None:
            db.execute(
                "INSERT INTO messages (conversation_id, role, content, created_at) "
                "VALUES (1, 'user', 'a deleted tern', '2024-01-01')"
            )
            index_pending_messages(db)
            db.execute("DELETE FROM messages WHERE id = 2")

        await old.call(index_then_delete_the_newest)
    async with ConversationStore(path) as store:
        again = await store.append(1, Message("user", "a returning tern"))
        assert again == 2
        assert {hit.message_id for hit in await store.search("tern")} == {1, again}
        for table in INDEXES:
            assert _indexed_ids(path, table) == [1, again]
        await store.db.call(_check_indexes)


async def test_delivery_times_leave_the_indexes_alone(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    answer = await store.append(conversation_id, Message("assistant", "here it is"))
    assert answer is not None
    await store.db.call(index_pending_messages)

    def segments(db: sqlite_utils.Database) -> list[tuple[int, int]]:
        return [
            db.execute(f"SELECT COUNT(*), MAX(id) FROM {table}_data").fetchone()
            for table in INDEXES
        ]

    before = await store.db.call(segments)
    # The delivery marks live in the outbox (atlas/outbox/rows.py), not on the message.
    from atlas.channels.base import Address
    from atlas.outbox.rows import insert_row, mark_delivered, mark_sending

    def deliver(db: sqlite_utils.Database) -> None:
        row_id = insert_row(db, Address("atlas", "c", "1"), "answer", "here it is")
        mark_sending(db, row_id)
        mark_delivered(db, row_id, "m1")

    await store.db.quick(deliver)
    assert await store.db.call(segments) == before  # no index rewrote the message


def test_text_query_for_each_index() -> None:
    assert TextQuery.build("c++ rust", "words") == TextQuery(
        "words", '"c++" AND "rust"', terms=("c++", "rust")
    )
    trigram = TextQuery.build('東京タワー 北京 "rust*"', "trigram")
    assert trigram == TextQuery(
        "trigram", '"東京タワー" AND "rust"', ("北京",), ("東京タワー", "北京", "rust")
    )
    assert TextQuery.build("北京", "trigram") == TextQuery("trigram", None, ("北京",), ("北京",))
    assert TextQuery.build('* " ^', "trigram") is None
    assert has_cjk("会議") and has_cjk("회의") and has_cjk("タワー") and not has_cjk("café")


async def test_like_terms_escape_wildcards(store: ConversationStore) -> None:
    conversation_id = await _chat(store)
    await store.append(conversation_id, Message("user", "北京 100 people"))  # 0, but no 0%
    percent = await store.append(conversation_id, Message("user", "北京 100% sure"))
    query = TextQuery.build("北京 0%", "trigram")
    assert query is not None
    found = await store.matching_messages(
        query, MessageFilter(conversation_id=conversation_id), limit=10
    )
    assert [m.id for m in found] == [percent]


def test_loading_the_store_does_not_load_pandas() -> None:
    """sqlite-utils would import pandas eagerly (~1.2 s); markitdown can still import it later."""
    import subprocess
    import sys

    code = (
        "import sys, atlas.store.conversations\n"
        "assert 'pandas' not in sys.modules and 'numpy' not in sys.modules\n"
        "import pandas\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


async def test_compactions_are_recorded_and_history_carries_ids(tmp_path: Path) -> None:
    async with ConversationStore(tmp_path / "c.db") as store:
        conversation = await store.conversation("console", "c", bot="atlas")
        ids = [await store.append(conversation.id, Message("user", f"m{i}")) for i in range(3)]
        history = await store.history(conversation.id)
        assert [m.id for m in history] == ids
        assert await store.last_compaction(conversation.id) is None
        await store.record_compaction(conversation.id, ids[1], "first summary")
        await store.record_compaction(conversation.id, ids[2], "second summary")
        assert await store.last_compaction(conversation.id) == (ids[2], "second summary")
        assert len(await store.history(conversation.id)) == 3  # nothing is deleted
        # Read together, as a turn starts: the compaction, and of the messages only the
        # first and those it kept (a long chat's whole history is not read every turn).
        messages, compaction = await store.history_and_compaction(conversation.id)
        assert compaction == (ids[2], "second summary")
        assert [m.id for m in messages] == [ids[0], ids[2]]
        other = await store.conversation("console", "d", bot="atlas")
        assert await store.history_and_compaction(other.id) == ([], None)


async def test_history_is_kept_between_turns_and_newer_rows_read(tmp_path: Path) -> None:
    async with ConversationStore(tmp_path / "c.db") as store:
        conversation = await _chat(store)
        first = await store.append(conversation, Message("user", "one"))
        before, _ = await store.history_and_compaction(conversation)
        second = await store.append(conversation, Message("assistant", "two"))
        # Another process writes to the same file: its row is seen too.
        with sqlite3.connect(store.path) as other:
            other.execute(
                "INSERT INTO messages (conversation_id, role, content, kind, created_at) "
                "VALUES (?, 'user', 'three', 'message', '2026-12-03T00:00:00+00:00')",
                [conversation],
            )
        after, compaction = await store.history_and_compaction(conversation)
        assert [m.content for m in after] == ["one", "two", "three"]
        assert after[0] is before[0]  # the first row was not read and converted again
        assert compaction is None
        # A compaction makes a whole read: the first message and those kept.
        await store.record_compaction(conversation, second, "summary")
        compacted, compaction = await store.history_and_compaction(conversation)
        assert compaction == (second, "summary")
        assert [m.id for m in compacted] == [first, second, after[2].id]
        assert compacted[0] is not before[0]
        # The caller's list is its own: appending to it changes nothing kept.
        compacted.append(Message("user", "not stored"))
        again, _ = await store.history_and_compaction(conversation)
        assert [m.content for m in again] == ["one", "two", "three"]


def test_history_cache_stays_within_its_limit_and_refuses_a_stale_read() -> None:
    cache = HistoryCache(max_bytes=3 * (MESSAGE_OVERHEAD_BYTES + 2))  # three 2-character texts
    rows = [(n, "user", f"m{n}", None, None, None, None, None) for n in (1, 2)]
    assert [m.id for m in cache.apply(1, Read(None, rows, whole=True)) or []] == [1, 2]
    cache.apply(2, Read(None, [(5, "user", "m5", None, None, None, None, None)], whole=True))
    assert cache.known(1) == Known(2, None) and cache.known(2) == Known(5, None)
    cache.apply(3, Read(None, [(7, "user", "m7", None, None, None, None, None)], whole=True))
    assert cache.known(1) is None  # least recently read, dropped past the limit
    assert cache.known(3) == Known(7, None)
    # Newer rows made against another compaction than the one kept: not merged.
    assert cache.apply(3, Read((7, "summary"), [], whole=False)) is None
    assert cache.known(3) is None


def test_two_processes_migrating_a_new_file_at_once_both_open_it(tmp_path: Path) -> None:
    """The daemon and an `atlas` command opening a fresh home's atlas.db together: the second
    waits for the first's migration and finds it applied (a deferred transaction had failed
    with "database is locked" when it came to write)."""
    import sqlite3
    import threading
    import time

    import sqlite_utils

    from atlas.store.db import apply_migrations

    path = tmp_path / "atlas.db"
    ran: list[str] = []

    def slow(db: sqlite_utils.Database) -> None:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # read first, then write
        time.sleep(0.2)
        db.execute("CREATE TABLE IF NOT EXISTS t (x)")
        ran.append(threading.current_thread().name)

    migrations = [("001_slow", slow)]
    results: dict[str, object] = {}
    start = threading.Barrier(2)

    def open_it(name: str) -> None:
        conn = sqlite3.connect(path, timeout=5, check_same_thread=False)
        db = sqlite_utils.Database(conn)
        db.execute("PRAGMA journal_mode=wal")
        start.wait()
        try:
            results[name] = apply_migrations(db, migrations, path)
        except Exception as exc:  # the assertion below names it
            results[name] = exc
        finally:
            conn.close()

    threads = [threading.Thread(target=open_it, args=(n,), name=n) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(str, results.values())) == ["['001_slow']", "[]"], results
    assert len(ran) == 1
