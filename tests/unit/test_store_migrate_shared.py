"""`atlas store migrate` copies atlas.db's pairing and the coding executors' records too
(atlas/store/pg/migrate_shared.py): read back through PostgreSQL's engines, they are what
atlas.db's give; conversation ids moved; counted; a second copy refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from atlas.channels.access import (
    approve_pairing,
    deny_pairing,
    list_pairings,
    paired_users,
    request_pairing,
)
from atlas.channels.chat_common import ChatGenerations
from atlas.cli import main
from atlas.errors import AtlasError
from atlas.executors.record import DelegationRecord
from atlas.executors.record_rows import record_rows
from atlas.executors.record_search import RecordFilter
from atlas.executors.task_rows import TaskRows, snapshot
from atlas.executors.workbench import Instance
from atlas.home import Home
from atlas.providers.base import Message
from atlas.store.conversations import ConversationStore
from atlas.store.home_db import HomeStore
from atlas.store.pg.conversations import PgConversationStore
from atlas.store.pg.executors import PgRecordRows
from atlas.store.pg.generations import PgGenerations
from atlas.store.pg.migrate import migrate_home
from atlas.store.pg.migrate_shared import copy_shared_records
from atlas.store.pg.pairing import PgPairing
from atlas.store.pg.server import PgServer
from tests.helpers import make_home

pytestmark = pytest.mark.postgres


async def _fill(home: Home) -> None:
    """A bot's file with two conversations (the second is the one the executor task came
    from), and atlas.db's pairing and executors' records."""
    async with ConversationStore(home.main_bot.db_path) as store:
        for chat in ("1", "2"):
            conversation = await store.conversation("telegram", chat, bot="atlas")
            await store.append(conversation.id, Message("user", f"hello {chat}"))
    shared = HomeStore(home.db_path)
    try:
        pending = await request_pairing(shared, "atlas", "telegram", "41", user_name="Ann")
        approved = await request_pairing(shared, "atlas", "slack", "U2", user_name="Bo")
        denied = await request_pairing(shared, "atlas", "telegram", "43")
        assert pending and approved and denied
        await approve_pairing(shared, approved.code)
        await deny_pairing(shared, denied.code)
        await ChatGenerations(shared, "telegram:atlas").bump("41")
        await ChatGenerations(shared, "telegram:atlas").bump("41")
        await ChatGenerations(shared, "slack:atlas").bump("C1", "171.5")

        instance = Instance(
            "ex-abc123",
            "claude-code",
            "claude-code@work",
            Path("/work/project"),
            bot="atlas",
            conversation_id=2,
            title="login page",
        )
        await TaskRows(shared).save(
            snapshot(instance, goal="login", route=None, last_event="started", run_kind="bot")
        )
        orphan = Instance("ex-def456", "codex", "codex", Path("/w"), bot="atlas", conversation_id=9)
        await TaskRows(shared).save(
            snapshot(orphan, goal="x", route=["codex"], last_event="started", run_kind="bot")
        )
        record = DelegationRecord(shared)
        turn = await record.start_turn(
            "ex-abc123",
            "claude-code",
            "claude-code@work",
            "/work/project",
            "go",
            "atlas:2",
            session_id="s-1",
            files_before="",
        )
        await record.add(turn, "question", "Which database?")
        await record.add(turn, "answer", "postgres", who="pat")
        await record.finish_turn(turn, "done it", " app.py | 2 +-\n", {"input_tokens": 3}, "done")
        await record.start_turn(
            "ex-mine",
            "claude-code",
            "claude-code",
            "/w",
            "mine",
            None,
            owner="person",
            files_before="",
        )
    finally:
        await shared.close()


async def test_pairing_and_executor_records_are_copied_and_counted(
    tmp_path: Path, postgres_url: str
) -> None:
    home = make_home(tmp_path / "home")
    await _fill(home)
    digest = hashlib.sha256(home.db_path.read_bytes()).hexdigest()

    shared = (await migrate_home(home, postgres_url, None)).shared

    assert shared is not None and shared.records is not None
    counts = shared.records
    assert (
        counts.pairing_codes,
        counts.paired_users,
        counts.executor_tasks,
        counts.executor_turns,
        counts.executor_entries,
        counts.chat_generations,
    ) == (3, 1, 2, 2, 6, 2)
    assert hashlib.sha256(home.db_path.read_bytes()).hexdigest() == digest  # read-only

    sqlite = HomeStore(home.db_path)
    async with PgServer(postgres_url) as server:
        try:
            pg_pairing = PgPairing(server)
            assert await list_pairings(pg_pairing, everything=True) == await list_pairings(
                sqlite, everything=True
            )
            assert await paired_users(pg_pairing) == await paired_users(sqlite)
            assert await pg_pairing.paired("atlas", "slack", "U2")
            pg_generations = ChatGenerations(PgGenerations(server), "telegram:atlas")
            assert await pg_generations.chat_key("41") == "41#2"
            slack_generations = ChatGenerations(PgGenerations(server), "slack:atlas")
            assert await slack_generations.chat_key("C1", "171.5") == "C1#1"

            pg_rows, sqlite_rows = PgRecordRows(server), record_rows(sqlite)
            second = await PgConversationStore(server, "atlas").conversation(
                "telegram", "2", bot="atlas"
            )
            task = await pg_rows.task("ex-abc123")
            old = await sqlite_rows.task("ex-abc123")
            assert task is not None and old is not None
            assert task == {**old, "conversation_id": second.id}
            orphan = await pg_rows.task("ex-def456")
            assert orphan is not None and orphan["conversation_id"] is None  # not another's
            [turn] = await pg_rows.instance_turns("ex-abc123")
            [old_turn] = await sqlite_rows.instance_turns("ex-abc123")
            assert turn == {**old_turn, "conversation": f"atlas:{second.id}"}
            # The copied entries are searched as atlas.db's are.
            everything = RecordFilter()
            for words in ("database", "pat", "done it", "app.py"):
                found = await pg_rows.match_instances(words, everything, limit=5)
                before = await sqlite_rows.match_instances(words, everything, limit=5)
                assert [f.instance_id for f in found] == [b.instance_id for b in before], words
                assert [f.hits for f in found] == [b.hits for b in before], words
            [mine] = await pg_rows.instance_turns("ex-mine")
            assert mine["conversation"] is None and mine["owner"] == "person"
            # New turns number after the copied ones.
            record = DelegationRecord(pg_rows)
            new_turn = await record.start_turn(
                "ex-abc123",
                "claude-code",
                "claude-code@work",
                "/work/project",
                "more",
                None,
                files_before="",
            )
            assert new_turn > max(turn["id"], mine["id"])
            assert len(await pg_rows.instance_turns("ex-abc123")) == 2
        finally:
            await sqlite.close()

        # Copied into twice: refused, whatever else the database holds.
        async with server.pool.acquire() as conn:
            with pytest.raises(AtlasError, match="already holds rows in pairing_codes"):
                await copy_shared_records(conn, home.db_path, {})


def test_the_command_reports_the_records_copied(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    home = make_home(tmp_path / "home")
    asyncio.run(_fill(home))
    assert main(["--home", str(home.root), "store", "migrate", "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert (
        "atlas.db: 3 pairing codes, 1 paired users, 2 executor tasks, 2 executor turns "
        "(6 entries), 2 /new generations copied and counted"
    ) in out
    assert "then `atlas run` (docs/scaling.md)" in out and "not copied" not in out
