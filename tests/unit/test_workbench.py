"""The workbench: instances added, updated, listed live first, and whose each is."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.executors.base import ExecutorError
from atlas.executors.workbench import KEPT_ENDED, Instance, Workbench, describe, whose


def make(instance_id: str, **fields: object) -> Instance:
    return Instance(instance_id, "claude-code", "claude-code@main", Path("/src/app"), **fields)  # type: ignore[arg-type]


def test_add_update_get_and_list_live_first() -> None:
    bench = Workbench()
    bench.add(make("ex-1", bot="atlas", conversation_id=1))
    bench.add(make("cc-2", owner="person", session_id="s-2"))
    ended = bench.update("ex-1", state="done", detail="Done: fixed")
    assert ended.ended_at is not None and bench.get("ex-1") == ended
    assert [i.id for i in bench.list()] == ["cc-2", "ex-1"]
    assert bench.find_session("s-2") is bench.get("cc-2")
    with pytest.raises(ExecutorError, match="no instance 'nope'"):
        bench.update("nope", state="done")


def test_whose_and_the_list_line() -> None:
    mine = make("ex-1", bot="atlas", conversation_id=1, title="fix the test")
    assert whose(mine, "atlas", 1) == "yours"
    assert whose(mine, "atlas", 2) == "another conversation's"
    assert whose(make("cc-1", owner="person"), "atlas", 1) == "the person's"
    line = describe(mine, "atlas", 1)
    assert line.startswith("- ex-1 (running, yours, claude-code@main, /src/app, since ")
    assert line.endswith(": fix the test")


def test_old_ended_instances_are_dropped_live_ones_never() -> None:
    bench = Workbench()
    bench.add(make("live"))
    for n in range(KEPT_ENDED + 5):
        bench.add(make(f"old-{n}", state="done"))
    ids = [i.id for i in bench.list()]
    assert "live" in ids and "old-0" not in ids and len(ids) == KEPT_ENDED + 1
