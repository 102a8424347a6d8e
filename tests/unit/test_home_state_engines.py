"""The gate's log and the delegations, the same calls on both engines: atlas.db (the embedded
default) and the home's PostgreSQL database. The PostgreSQL run carries the `postgres` marker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atlas.store.engine import HomeStateEngine
from atlas.store.home_db import GateRecord, HomeStore
from atlas.store.pg.home_state import PgHomeState
from atlas.store.pg.server import PgServer


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def state(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HomeStateEngine]:
    if request.param == "sqlite":
        store = HomeStore(tmp_path / "atlas.db")
        yield store
        await store.close()
        return
    async with PgServer(request.getfixturevalue("postgres_url")) as server:
        yield PgHomeState(server)


def _record(verdict: str, summary: str) -> GateRecord:
    return GateRecord(
        "atlas", 7, "conversation", "run_command", "ab12", summary, verdict, "rule", "why", "user"
    )


def test_both_are_home_state_engines(tmp_path: Path) -> None:
    assert isinstance(HomeStore(tmp_path / "atlas.db"), HomeStateEngine)
    assert isinstance(PgHomeState(PgServer("postgresql://x@127.0.0.1/x")), HomeStateEngine)


async def test_gate_log_newest_first(state: HomeStateEngine) -> None:
    await state.record_decision(_record("allow", "ls"))
    await state.record_decision(_record("deny", "rm -rf ~"))
    recent = await state.recent_decisions()
    assert [(r["verdict"], r["summary"], r["conversation_id"]) for r in recent] == [
        ("deny", "rm -rf ~", 7),
        ("allow", "ls", 7),
    ]
    assert recent[0]["at"] >= recent[1]["at"] and recent[0]["answered_by"] == "user"
    assert len(await state.recent_decisions(limit=1)) == 1


async def test_delegations_recorded_updated_and_listed(state: HomeStateEngine) -> None:
    for number in range(3):
        await state.record_delegation(
            {
                "id": f"sa-{number}",
                "batch": "b1",
                "bot": "atlas",
                "parent_conversation_id": 4,
                "parent_run_kind": "conversation",
                "goal": f"goal {number}",
                "status": "queued",
                "created_at": f"2026-01-0{number + 1}T00:00:00.000000+00:00",
            }
        )
    await state.update_delegation("sa-1", status="done", result="found it", rounds=3)
    done = await state.delegation("sa-1")
    assert done is not None
    assert (done["status"], done["result"], done["rounds"], done["goal"]) == (
        "done",
        "found it",
        3,
        "goal 1",
    )
    assert await state.delegation("sa-9") is None
    listed = await state.delegations("atlas", 4, limit=2)
    assert [row["id"] for row in listed] == ["sa-2", "sa-1"]
    assert await state.delegations("other", 4) == []
