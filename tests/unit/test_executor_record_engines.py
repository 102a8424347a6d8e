"""The coding executors' records, the same calls on both engines (atlas/executors/record_rows.py):
atlas.db (the embedded default) and the home's PostgreSQL database (the `postgres` marker).
The executor tasks as rows (TaskRows) and the delegation record's turns (DelegationRecord)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.executors.record import DelegationRecord
from atlas.executors.record_rows import RecordRows, SqliteRecordRows, record_rows
from atlas.executors.task_rows import CUT_BY_STOP, TaskRows, instance_of, route_of, snapshot
from atlas.executors.workbench import Instance
from atlas.store.home_db import HomeStore
from atlas.store.pg.executors import PgRecordRows
from atlas.store.pg.server import PgServer


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[HomeStore | RecordRows]:
    """atlas.db's HomeStore as every caller hands it in today, or PostgreSQL's engine."""
    if request.param == "sqlite":
        home_store = HomeStore(tmp_path / "atlas.db")
        yield home_store
        await home_store.close()
        return
    async with PgServer(request.getfixturevalue("postgres_url")) as server:
        yield PgRecordRows(server)


def test_both_are_record_rows(tmp_path: Path) -> None:
    assert isinstance(record_rows(HomeStore(tmp_path / "atlas.db")), SqliteRecordRows)
    pg = PgRecordRows(PgServer("postgresql://x@127.0.0.1/x"))
    assert isinstance(pg, RecordRows) and record_rows(pg) is pg


def _instance(number: int, state: str = "running") -> Instance:
    return Instance(
        f"ex-{number:06x}",
        "claude-code",
        "claude-code@work",
        Path("/work/project"),
        state=state,
        session_id=f"session-{number}" if number % 2 else None,
        started_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=number),
        title=f"task {number}",
        bot="atlas",
        conversation_id=10 + number,
    )


async def test_task_rows_saved_replaced_and_listed(store: HomeStore | RecordRows) -> None:
    rows = TaskRows(store)
    for number in range(3):
        await rows.save(
            snapshot(
                _instance(number),
                goal=f"goal {number}",
                route=["claude-code@work", "codex"] if number == 1 else None,
                last_event="started",
                run_kind="conversation",
            )
        )
    done = _instance(1, state="done")
    done.ended_at = done.started_at + timedelta(minutes=5)
    await rows.save(
        snapshot(
            done,
            goal="goal 1",
            route=["claude-code@work", "codex"],
            last_event="ended",
            run_kind="conversation",
            result_summary="x" * 3000,
        )
    )
    row = await rows.get(" ex-000001 ")
    assert row is not None
    assert (row["state"], row["last_event"], len(row["result_summary"])) == ("done", "ended", 2000)
    assert route_of(row) == ["claude-code@work", "codex"]
    back = instance_of(row)
    assert (back.id, back.conversation_id, back.session_id, back.ended_at) == (
        "ex-000001",
        11,
        "session-1",
        done.ended_at,
    )
    assert await rows.get("ex-ffffff") is None
    assert [r["id"] for r in await rows.latest(2)] == ["ex-000002", "ex-000001"]


async def test_live_tasks_interrupted_reported_once(store: HomeStore | RecordRows) -> None:
    rows = TaskRows(store)
    record = DelegationRecord(store)
    for number, state in ((0, "running"), (1, "asking"), (2, "done")):
        await rows.save(
            snapshot(
                _instance(number, state),
                goal="g",
                route=None,
                last_event="started",
                run_kind="conversation",
            )
        )
    turn = await record.start_turn(
        "ex-000000", "claude-code", "claude-code@work", "/work/project", "go", "atlas:10"
    )
    assert sorted(await rows.interrupt_live()) == ["ex-000000", "ex-000001"]
    assert await rows.interrupt_live() == []  # nothing live any more
    unreported = await rows.unreported()
    assert [r["id"] for r in unreported] == ["ex-000000", "ex-000001"]
    assert unreported[0]["detail"] == f"interrupted: {CUT_BY_STOP}"
    await rows.mark_reported("ex-000000")
    assert [r["id"] for r in await rows.unreported()] == ["ex-000001"]
    [turn_row] = await record_rows(store).instance_turns("ex-000000")
    assert (turn_row["id"], turn_row["state"]) == (turn, "interrupted")


async def test_delegation_record_turns_and_entries(store: HomeStore | RecordRows) -> None:
    record = DelegationRecord(store)
    first = await record.start_turn(
        "ex-a",
        "claude-code",
        "claude-code@work",
        "/work/project",
        "Add a login page",
        "atlas:7",
        session_id="s-1",
        files_before=" app.py | 2 +-\n",
    )
    await record.add(first, "question", "Which database?")
    await record.add(first, "answer", "Which database?: postgres", who="pat")
    await record.finish_turn(
        first,
        "Done: login page added",
        " app.py | 2 +-\n login.py | 40 ++++\n",
        {"input_tokens": 10, "output_tokens": 5},
        "done",
    )
    # A resume goes on in the instance's last session; a final told already is not repeated.
    second = await record.start_turn(
        "ex-a", "claude-code", "claude-code@work", "/work/project", "And tests", "atlas:7"
    )
    await record.add(second, "error", "limit reached")
    await record.finish_turn(second, "limit reached", "", None, "limit")
    with pytest.raises(ValueError, match="unknown entry kind"):
        await record.add(second, "gossip", "no")

    turns = await record_rows(store).instance_turns("ex-a")
    assert [t["id"] for t in turns] == [first, second]
    assert [t["session_id"] for t in turns] == ["s-1", "s-1"]
    assert [t["state"] for t in turns] == ["done", "limit"]
    assert json.loads(turns[0]["usage"]) == {"input_tokens": 10, "output_tokens": 5}
    assert turns[1]["usage"] is None and turns[0]["ended_at"]
    assert [(e["kind"], e["who"], e["text"]) for e in turns[0]["entries"]] == [
        ("prompt", None, "Add a login page"),
        ("question", None, "Which database?"),
        ("answer", "pat", "Which database?: postgres"),
        ("final", None, "Done: login page added"),
        ("files", None, "changed: login.py"),
    ]
    assert [(e["kind"], e["text"]) for e in turns[1]["entries"]] == [
        ("prompt", "And tests"),
        ("error", "limit reached"),
    ]
    await record.add(second, "session", "s-2")
    assert [t["session_id"] for t in await record_rows(store).instance_turns("ex-a")] == [
        "s-1",
        "s-2",
    ]
    assert await record_rows(store).instance_turns("ex-none") == []


# ---- reading back: delegation_search's calls ------------------------------------------------


async def _three_instances(store: HomeStore | RecordRows) -> None:
    record = DelegationRecord(store)
    app = await record.start_turn(
        "ex-a",
        "claude-code",
        "claude-code@work",
        "/work/app",
        "Add the login page",
        "atlas:1",
        files_before="",
    )
    await record.add(app, "question", "Which database?")
    await record.add(app, "answer", "postgres, please", who="pat")
    await record.finish_turn(app, "Deployed the login page", "", None, "done")
    docs = await record.start_turn(
        "ex-b",
        "codex",
        "codex",
        "/work/docs",
        "Write the setup docs",
        "helper:2",
        files_before="",
    )
    await record.finish_turn(docs, "docs written", "", None, "done")
    await record.start_turn(
        "ex-c",
        "claude-code",
        "claude-code",
        "/home/me/café",
        "Fix the café menu",
        None,
        owner="person",
        files_before="",
    )


async def test_the_record_is_searched_alike(store: HomeStore | RecordRows) -> None:
    from atlas.executors.record_search import RecordFilter

    await _three_instances(store)
    rows = record_rows(store)
    everything = RecordFilter()

    def ids(found: list) -> list[str]:  # type: ignore[type-arg]
        return [item.instance_id for item in found]

    assert ids(await rows.latest_instances(everything, limit=5)) == ["ex-c", "ex-b", "ex-a"]
    assert ids(await rows.latest_instances(everything, limit=2, oldest=True)) == ["ex-a", "ex-b"]
    assert ids(await rows.latest_instances(RecordFilter(executor="codex"), limit=5)) == ["ex-b"]
    work = RecordFilter(executor="claude-code@work")
    assert ids(await rows.latest_instances(work, limit=5)) == ["ex-a"]
    assert ids(await rows.latest_instances(RecordFilter(folder="DOCS"), limit=5)) == ["ex-b"]
    assert ids(await rows.latest_instances(RecordFilter(bot="helper"), limit=5)) == ["ex-b"]
    assert ids(await rows.latest_instances(RecordFilter(exclude=("ex-c",)), limit=5)) == [
        "ex-b",
        "ex-a",
    ]
    [summary] = await rows.latest_instances(RecordFilter(bot="atlas"), limit=5)
    assert (summary.instance_id, summary.turns) == ("ex-a", 1)

    [login] = await rows.match_instances("login", everything, limit=5)
    assert (login.instance_id, login.turns, login.hits) == ("ex-a", 1, 2)
    assert login.score < 0  # lower is better, as bm25's
    assert ids(await rows.match_instances("deploying", everything, limit=5)) == ["ex-a"]  # stem
    assert ids(await rows.match_instances("cafe", everything, limit=5)) == ["ex-c"]  # accent
    assert ids(await rows.match_instances("pat", everything, limit=5)) == ["ex-a"]  # who
    assert await rows.match_instances("login docs", everything, limit=5) == []  # all words
    assert await rows.match_instances("login", RecordFilter(bot="helper"), limit=5) == []
    assert await rows.match_instances("&&", everything, limit=5) == []  # nothing searchable

    hits = await rows.matching_entries("login", "ex-a", limit=5)
    assert sorted(hit["kind"] for hit in hits) == ["final", "prompt"]
    assert all("**login**" in hit["snippet"] for hit in hits)
    assert {hit["turn"] for hit in hits} == {
        login_turn["id"] for login_turn in (await rows.instance_turns("ex-a"))
    }
    assert await rows.matching_entries("login", "ex-b", limit=5) == []
