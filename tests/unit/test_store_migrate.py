"""`atlas store migrate --to postgresql://…`, doctor's store lines, and `atlas run` refusing a
url it cannot run on yet. Against a real (throwaway) PostgreSQL server."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from atlas.channels.base import Address
from atlas.cli import main
from atlas.errors import AtlasError
from atlas.home import Home
from atlas.outbox.rows import Outgoing, mark_maybe
from atlas.providers.base import Message, ToolCall
from atlas.routines.store import AlreadyFired, RoutineStore, RunResult, Target
from atlas.start_checks import check_before_start
from atlas.store.conversations import ConversationStore
from atlas.store.home_db import GateRecord, HomeStore
from atlas.store.pg.conversations import PgConversationStore
from atlas.store.pg.doctor import store_checks
from atlas.store.pg.home_state import PgHomeState
from atlas.store.pg.migrate import migrate_home
from atlas.store.pg.migrate_outbox import RoutinesCopy
from atlas.store.pg.outbox import PgOutboxRows
from atlas.store.pg.routines import PgRoutineStore
from atlas.store.pg.schema import SCHEMA_VERSION
from atlas.store.pg.server import PgServer
from atlas.store.search import MessageFilter, TextQuery
from tests.helpers import BASE_CONFIG, make_home

pytestmark = pytest.mark.postgres


def _with_url(home: Home, url: str) -> Home:
    text = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    home.config_path.write_text(text + f'\n[store]\nurl = "{url}"\n', encoding="utf-8")
    return Home(home.root)


async def _fill(home: Home) -> dict[str, list[int]]:
    """Two bots' files: tool calls, an event id, an answer pointing at a message, CJK text,
    a compaction; the ids written, by bot."""
    ids: dict[str, list[int]] = {}
    for number, name in enumerate(sorted(home.bots)[:2]):
        async with ConversationStore(home.bots[name].db_path) as store:
            first = await store.conversation("telegram", "42", bot=name)
            second = await store.conversation("slack", "C9", thread="t", user="U1", bot=name)
            asked = await store.append(
                first.id, Message("user", f"deploy the café {number}"), event_id="e1"
            )
            calls = [ToolCall("c1", "run_command", '{"command": "ls"}')]
            made = [
                asked,
                await store.append(first.id, Message("assistant", "", tool_calls=calls)),
                await store.append(
                    first.id, Message("tool", "ok", tool_call_id="c1", name="run_command")
                ),
                await store.append(first.id, Message("assistant", "deployed"), answers_upto=asked),
                await store.append(second.id, Message("user", "明日は東京タワーで会議があります")),
            ]
            await store.record_compaction(first.id, made[2], "summary of the start")  # type: ignore[arg-type]
            ids[name] = [i for i in made if i is not None]
    # The home's shared state: a gate decision and a delegation naming a conversation.
    helper_conversation = 2  # the helper bot's slack conversation, id 2 in its own file
    shared = HomeStore(home.db_path)
    await shared.record_decision(
        GateRecord(
            "helper",
            helper_conversation,
            "conversation",
            "run_command",
            "d1",
            "ls",
            "allow",
            "",
            "",
            "rule",
        )
    )
    await shared.record_delegation(
        {
            "id": "sa-1",
            "bot": "helper",
            "parent_conversation_id": helper_conversation,
            "conversation_id": 99,
            "goal": "look",
            "status": "done",
        }
    )
    await shared.close()
    return ids


def _two_bot_home(root: Path) -> Home:
    make_home(root)
    (root / "bots" / "helper").mkdir(parents=True)
    (root / "bots" / "helper" / "bot.toml").write_text('title = "Helper"\n', encoding="utf-8")
    return Home(root)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_migrate_copies_every_bot_and_counts(tmp_path: Path, postgres_url: str) -> None:
    home = _two_bot_home(tmp_path / "home")
    await _fill(home)
    bots = sorted(home.bots)[:2]
    before = {name: _digest(home.bots[name].db_path) for name in bots}

    report = await migrate_home(home, postgres_url, None)
    copies, shared = report.bots, report.shared

    assert [(c.bot, c.conversations, c.messages, c.compactions) for c in copies] == [
        (bots[0], 2, 5, 1),
        (bots[1], 2, 5, 1),
    ]
    assert shared is not None and (shared.gate_decisions, shared.delegations) == (1, 1)
    assert {name: _digest(home.bots[name].db_path) for name in bots} == before  # read only
    async with PgServer(postgres_url) as server:
        for number, name in enumerate(bots):
            copied = PgConversationStore(server, name)
            async with ConversationStore(home.bots[name].db_path) as original:
                first = await original.conversation("telegram", "42", bot=name)
                there = await copied.conversation("telegram", "42", bot=name)
                old, new = await original.history(first.id), await copied.history(there.id)
                assert [(m.role, m.content, m.tool_calls) for m in new] == [
                    (m.role, m.content, m.tool_calls) for m in old
                ]
                # Ids that point at messages moved with them.
                assert new[3].answers_upto == new[0].id
                compaction = await copied.last_compaction(there.id)
                assert compaction == (new[2].id, "summary of the start")
            # Search works on what was copied, each bot seeing only its own.
            hits = await copied.search("cafe deploy")
            assert [h.conversation_id for h in hits] == [there.id]
            assert hits[0].snippet == f"**deploy** the **café** {number}"
            cjk = TextQuery.build("東京", "trigram")
            assert cjk is not None
            assert (
                len(await copied.match_conversations(cjk, MessageFilter(), sort="newest", limit=5))
                == 1
            )
            # The event id still stops a redelivered event.
            assert await copied.append(there.id, Message("user", "again"), event_id="e1") is None

        # Shared state points at the helper's conversation under its new id; an id the bot's
        # file does not have (99) is not left pointing at another conversation.
        helper = await PgConversationStore(server, "helper").conversation(
            "slack", "C9", thread="t", user="U1", bot="helper"
        )
        state = PgHomeState(server)
        [decision] = await state.recent_decisions()
        assert (decision["bot"], decision["conversation_id"]) == ("helper", helper.id)
        delegation = await state.delegation("sa-1")
        assert delegation is not None
        assert (delegation["parent_conversation_id"], delegation["conversation_id"]) == (
            helper.id,
            None,
        )
        assert helper.id != 2  # the atlas bot's conversations came first

    with pytest.raises(AtlasError, match=f"already holds 2 conversation\\(s\\) of bot '{bots[0]}'"):
        await migrate_home(home, postgres_url, None)


def test_the_command_reports_and_refuses_a_bad_url(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    home = make_home(tmp_path / "home")
    assert main(["--home", str(home.root), "store", "migrate", "--to", postgres_url]) == 0
    out = capsys.readouterr().out
    assert "copied 0 bot(s) to postgresql://atlas@127.0.0.1:" in out
    assert "then `atlas run` (docs/scaling.md)" in out and "not copied" not in out
    assert "outbox rows" not in out  # a home with no bot files has no outbox to copy
    bad = "postgresql://atlas:pw@127.0.0.1/x"
    assert main(["--home", str(home.root), "store", "migrate", "--to", bad]) == 2
    err = capsys.readouterr().err
    assert "--to: secrets are never stored in config" in err and ":pw@" not in err


async def test_doctor_checks_server_schema_and_latency(tmp_path: Path, postgres_url: str) -> None:
    home = make_home(tmp_path / "home")
    assert await store_checks(home.settings) == []  # the embedded default: nothing to say
    home = _with_url(home, postgres_url)

    empty = {name: (ok, detail) for name, ok, detail, _ in await store_checks(home.settings)}
    assert empty["store server"][0] and "PostgreSQL 1" in empty["store server"][1]
    assert empty["store schema"] == (False, f"version 0, this Atlas needs {SCHEMA_VERSION}")

    async with PgServer(postgres_url):  # opening brings the schema up to date
        pass
    lines = {name: (ok, detail) for name, ok, detail, _ in await store_checks(home.settings)}
    assert lines["store schema"] == (True, f"version {SCHEMA_VERSION}")
    assert lines["store latency"][0] and "ms per round trip" in lines["store latency"][1]
    assert lines["store text"] == (True, "UTF8, letters of every script")


async def test_doctor_names_a_database_that_cannot_fold_case(
    tmp_path: Path, postgres_url: str
) -> None:
    import asyncpg

    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(
            "CREATE DATABASE ascii_only ENCODING 'SQL_ASCII' LC_CTYPE 'C' LC_COLLATE 'C' "
            "TEMPLATE template0"
        )
    finally:
        await conn.close()
    home = _with_url(make_home(tmp_path / "home"), postgres_url.rsplit("/", 1)[0] + "/ascii_only")
    lines = {name: (ok, fix) for name, ok, _, fix in await store_checks(home.settings)}
    ok, fix = lines["store text"]
    assert not ok and "ENCODING 'UTF8'" in fix


async def test_doctor_names_an_unreachable_server(tmp_path: Path, postgres_url: str) -> None:
    port = int(postgres_url.rsplit(":", 1)[1].split("/")[0])
    home = _with_url(make_home(tmp_path / "home"), f"postgresql://atlas@127.0.0.1:{port + 1}/x")
    [(name, ok, detail, fix)] = await store_checks(home.settings)
    assert name == "store server" and not ok
    assert "cannot reach the PostgreSQL store postgresql://atlas@127.0.0.1" in detail
    assert "$ATLAS_STORE_PASSWORD" in fix


def test_run_checks_a_home_with_a_url_as_any_other(tmp_path: Path) -> None:
    """`atlas run` no longer refuses `[store] url` (it serves the home from PostgreSQL: the
    server is reached when it opens the home's engines, tests/integration/test_run_postgres.py)."""
    home = _with_url(make_home(tmp_path / "home"), "postgresql://atlas@127.0.0.1:5432/atlas")
    check_before_start(home)


async def test_migrate_copies_the_outboxes_and_routines_and_counts(
    tmp_path: Path, postgres_url: str
) -> None:
    home = _two_bot_home(tmp_path / "home")
    await _fill(home)
    # Both bots' files hold the same rows: the second's ids move (the first's took theirs).
    for bot in sorted(home.bots)[:2]:
        async with ConversationStore(home.bots[bot].db_path) as store:
            first = await store.conversation("telegram", "42", bot=bot)
            outgoing = Outgoing(Address(bot, "telegram", "42"), "the answer", notes=("(a note)",))
            answer = await store.append(first.id, Message("assistant", "the answer"), also=outgoing)
            # The answer caught while sending: `maybe`, and the note about it keyed by its row.
            caught = outgoing.rows[1]
            await store.db.quick(
                lambda db, caught=caught: mark_maybe(db, caught, "cut", "(it may not have come)")
            )
    routines = RoutineStore(HomeStore(home.db_path))
    routine = await routines.create(bot, "digest", "p", "every 1h", Target("telegram", "42"))
    slot = datetime(2026, 12, 6, 9, tzinfo=UTC)
    run = await routines.start_run(routine, "schedule", slot)
    await routines.finish_run(run, RunResult("ok", "delivered", conversation_id=first.id))
    await routines.start_run(routine, "manual", None)
    # A second fire of the slot, as an Atlas before fires were keyed could leave.
    await routines.home_store.call(
        lambda db: db.execute(
            "INSERT INTO routine_runs (routine_id, bot, name, trigger, scheduled_for, "
            "started_at, status) VALUES (?, ?, 'digest', 'schedule', ?, ?, 'ok')",
            [routine.id, bot, slot.isoformat(), slot.isoformat()],
        )
    )
    await routines.home_store.close()

    report = await migrate_home(home, postgres_url, None)
    assert [(o.bot, o.rows) for o in report.outboxes] == [
        (name, 3) for name in sorted(home.bots)[:2]
    ]
    assert report.routines == RoutinesCopy(routines=1, runs=2, duplicate_fires=1)

    async with PgServer(postgres_url) as server:
        rows = PgOutboxRows(server)
        copied = PgConversationStore(server, bot)
        there = await copied.conversation("telegram", "42", bot=bot)
        history = await copied.history(there.id)
        assert [r.kind for r in await rows.open_rows(bot, before="9999")] == ["note", "notice"]
        every = await server.pool.fetch(
            "SELECT id, kind, state, text, message_id, key FROM outbox WHERE bot = $1 ORDER BY id",
            bot,
        )
        assert [(r["kind"], r["state"], r["text"]) for r in every] == [
            ("note", "pending", "(a note)"),
            ("answer", "maybe", "the answer"),
            ("notice", "pending", "(it may not have come)"),
        ]
        # The answer's row delivers the answer's new id; the note is keyed by its row's new id.
        answer_there = await server.pool.fetchval(
            "SELECT id FROM messages WHERE bot = $1 AND content = 'the answer'", bot
        )
        assert every[1]["message_id"] == answer_there != answer
        assert every[2]["key"] == f"maybe:{every[1]['id']}" != f"maybe:{caught.id}"
        assert answer is not None and history[-1].content == "(it may not have come)"
        pg_routines = PgRoutineStore(server)
        [moved] = await pg_routines.all()
        assert (moved.id, moved.name, moved.target) == (routine.id, "digest", routine.target)
        runs = await pg_routines.runs(routine.id)
        assert [(r.trigger, r.status) for r in runs] == [("manual", "running"), ("schedule", "ok")]
        assert runs[1].conversation_id == there.id
        with pytest.raises(AlreadyFired):  # the slot copied is fired once on PostgreSQL too
            await pg_routines.start_run(moved, "schedule", slot)
        # New routines and runs continue after the copied ids.
        later = await pg_routines.create(bot, "later", "p", "every 1h", None)
        assert later.id > routine.id
