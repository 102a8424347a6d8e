"""delegation_search over a recorded history: the delegation record (atlas/executors/record.py)
written through its API, Claude Code session logs as the harness keeps them, and the four shapes
read back (browse, discovery, read, scroll) with their filters."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from atlas.executors.claude_files import project_key
from atlas.executors.record import DelegationRecord, changed_files
from atlas.executors.workbench import Instance, Workbench
from atlas.home import Home
from atlas.newbot import create_bot
from atlas.store.home_db import HomeStore
from atlas.tools.delegation_search import delegation_search
from atlas.tools.registry import RunContext
from tests.helpers import BASE_CONFIG, make_home, run_context

LOGIN_STAT = " tests/test_login.py | 4 ++--\n 1 file changed, 2 insertions(+), 2 deletions(-)"


@dataclass
class History:
    home: Home
    app: Path
    docs: Path
    work: Path  # claude-code@work's config folder


def session_log(config_dir: Path, folder: Path, session_id: str, entries: int) -> None:
    """A Claude Code session log where the harness keeps it: user and assistant lines, a tool
    call and its result every third line, and lines the read-back leaves out."""
    path = config_dir / "projects" / project_key(folder) / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True)
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    lines = [{"type": "queue-operation", "operation": "enqueue"}]
    for i in range(entries):
        at = (start + timedelta(minutes=i)).isoformat().replace("+00:00", "Z")
        if i % 3 == 2:
            block = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "ls"}}
            lines.append({"type": "assistant", "timestamp": at, "message": {"content": [block]}})
            continue
        role = "user" if i % 3 == 0 else "assistant"
        text = f"{role} says step {i}"
        lines.append({"type": role, "timestamp": at, "message": {"content": text}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


async def record_history(tmp_path: Path) -> History:
    app, docs, work, codex = (tmp_path / n for n in ("app", "docs", "claude-work", "codex"))
    for folder in (app, docs, work, codex):
        folder.mkdir()
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + (
        f'\n[executors.claude-code]\nenabled = true\naccounts = {{ work = "{work}" }}\n'
        f'\n[executors.codex]\nenabled = true\naccounts = {{ main = "{codex}" }}\n'
    )
    home = make_home(tmp_path / "home", config=config)
    create_bot(home, "scout", "Scout", "A second bot.")
    store = HomeStore(home.db_path)
    record = DelegationRecord(store)
    try:
        # Claude Code fixed a test: a question answered by the person, a steer, files changed.
        turn = await record.start_turn(
            "ex-aaa111", "claude-code", "claude-code@work", str(app),
            "fix the failing login test", "atlas:1",
        )  # fmt: skip
        await record.add(turn, "session", "sess-1")
        await record.add(turn, "question", "Which clock library?")
        await record.add(turn, "answer", "Which clock library?: freezegun", who="pat")
        await record.add(turn, "steer", "also mention it in the café notes")
        await record.add(turn, "final", "Fixed the login test by mocking the clock.")
        usage = {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}
        await record.finish_turn(
            turn, "Fixed the login test by mocking the clock.", LOGIN_STAT, usage, "done"
        )
        # Codex wrote docs; its session log is gone (deleted by the harness).
        turn = await record.start_turn(
            "ex-bbb222", "codex", "codex@main", str(docs), "write the install section", "atlas:2"
        )
        await record.finish_turn(
            turn, "Wrote the install section.", "", None, "done", session_id="thread-9"
        )
        # Another bot's delegation, which failed.
        turn = await record.start_turn(
            "ex-ccc333", "codex", "codex@main", str(app), "bump the login dependency", "scout:4"
        )
        await record.add(turn, "error", "You've hit your usage limit")
        await record.finish_turn(turn, "You've hit your usage limit", "", None, "limit")
    finally:
        await store.close()
    session_log(work, app, "sess-1", 30)
    return History(home, app, docs, work)


@pytest.fixture
async def history(tmp_path: Path) -> AsyncIterator[History]:
    yield await record_history(tmp_path)


async def search(run: RunContext, **arguments: object) -> str:
    result = await delegation_search.invoke(run, arguments)
    assert not result.is_error, result.text
    return result.text


async def test_browse_lists_the_latest_with_filters(history: History) -> None:
    run = run_context(history.home)
    text = await search(run)
    assert text.startswith("3 delegation(s), latest first")
    assert text.index("## ex-ccc333") < text.index("## ex-bbb222") < text.index("## ex-aaa111")
    assert "[prompt] fix the failing login test" in text
    assert "[final] Fixed the login test by mocking the clock." in text
    assert "[files] changed: tests/test_login.py" in text
    assert "[limit] You've hit your usage limit" in text and "from scout:4" in text

    only_codex = await search(run, executor="codex")
    assert "ex-aaa111" not in only_codex and "ex-bbb222" in only_codex
    assert "ex-bbb222" not in await search(run, executor="claude-code@work")
    by_folder = await search(run, folder=history.docs.name)
    assert "ex-bbb222" in by_folder and "ex-aaa111" not in by_folder
    assert await search(run, before="2020-01-01") == "No delegation matches those filters."
    assert "3 delegation(s)" in await search(run, after="1d")
    bad = await delegation_search.invoke(run, {"after": "last tuesday"})
    assert bad.is_error and "is not a date" in bad.text


async def test_discovery_finds_prompts_answers_and_files_with_stems_and_accents(
    history: History,
) -> None:
    run = run_context(history.home)
    text = await search(run, query="login")
    # The best match in full, with every entry of its turn; the others by their matching entries.
    best, *others = text.split("\n\n")[1:-1]
    assert best.startswith("## ex-aaa111") and "in full:" in best
    for shown in (
        "[prompt] fix the failing login test",
        "[question] Which clock library?",
        "[answer by pat] Which clock library?: freezegun",
        "[steer] also mention it in the café notes",
        "[git diff --stat after]\n    tests/test_login.py | 4 ++--",
        "[usage] 1,200 in, 300 out tokens, $0.0123",
        "session sess-1",
    ):
        assert shown in best, shown
    assert others and others[0].startswith("## ex-ccc333")
    assert "[turn 1 prompt] bump the **login** dependency" in others[0]

    assert "## ex-aaa111" in await search(run, query="mocked clocks")  # stems
    assert "## ex-aaa111" in await search(run, query="cafe")  # accents ignored
    assert "## ex-aaa111" in await search(run, query="test_login.py")  # the files it changed
    assert "## ex-aaa111" in await search(run, query='freezegun "pat')  # quotes are words
    none = await search(run, query="login", executor="claude-code", before="2020-01-01")
    assert none.startswith("No delegation matches 'login' with those filters")


async def test_read_shows_the_record_then_the_session_start_and_end(history: History) -> None:
    run = run_context(history.home)
    text = await search(run, instance_id="ex-aaa111")
    assert text.startswith("## ex-aaa111 · claude-code@work")
    assert "[answer by pat]" in text and "[git diff --stat after]" in text
    log = text.split("claude-code's own session log", 1)[1]
    assert "30 entries, 10 of tools left out (include_tools=true shows them)" in log
    shown = [int(n) for n in re.findall(r"\[#(\d+) ", log)]
    assert shown == [0, 1, 3, 4, 6, 22, 24, 25, 27, 28]  # five at each end, no tools
    assert "… 10 entries …" in log and "[#0 user 2026-12-01 09:00] user says step 0" in log
    assert "Next: instance_id with around=#, e.g. around=15, scrolls it." in log

    with_tools = await search(run, instance_id="ex-aaa111", include_tools=True)
    assert '[#2 tool Bash 2026-12-01 09:02] {"command": "ls"}' in with_tools


async def test_read_says_a_session_log_that_was_never_written(history: History) -> None:
    text = await search(run_context(history.home), instance_id="ex-bbb222")
    assert "[final] Wrote the install section." in text
    assert "codex's own session log (session thread-9) is gone: it was never written to" in text
    assert "codex does not delete its sessions" in text and "deleted it" not in text
    scroll = await delegation_search.invoke(
        run_context(history.home), {"instance_id": "ex-bbb222", "around": 3}
    )
    assert not scroll.is_error and "is gone" in scroll.text


async def test_scroll_moves_through_the_session(history: History) -> None:
    run = run_context(history.home)
    text = await search(run, instance_id="ex-aaa111", around=10, window=2)
    assert "around entry #10:" in text
    assert [int(n) for n in re.findall(r"\[#(\d+) ", text)] == [7, 9, 10, 12, 13]
    assert "Next: earlier: around=7; later: around=13." in text
    tools = await search(run, instance_id="ex-aaa111", around=11, window=0, include_tools=True)
    assert "[#11 tool Bash" in tools
    hidden = await search(run, instance_id="ex-aaa111", around=11, window=0)
    assert "around entry #12:" in hidden  # a tool entry, hidden: the next one shown
    wrong = await delegation_search.invoke(run, {"around": 3})
    assert wrong.is_error and "needs the instance_id" in wrong.text
    missing = await delegation_search.invoke(run, {"instance_id": "ex-nope"})
    assert missing.is_error and "no delegation 'ex-nope'" in missing.text


async def test_another_bot_sees_only_the_delegations_it_started(history: History) -> None:
    scout = run_context(history.home, bot="scout")
    text = await search(scout)
    assert "ex-ccc333" in text and "ex-aaa111" not in text
    assert "ex-aaa111" not in await search(scout, query="login")
    refused = await delegation_search.invoke(scout, {"instance_id": "ex-aaa111"})
    assert refused.is_error


async def test_it_is_untrusted_data_and_offered_where_delegate_is(
    history: History, tmp_path: Path
) -> None:
    assert delegation_search.untrusted and delegation_search.read_only
    assert delegation_search.deferred
    assert delegation_search.unavailable_reason(run_context(history.home)) is None
    assert delegation_search.unavailable_reason(run_context(history.home, kind="subagent"))


async def test_without_any_executor_the_persons_own_sessions_are_recalled(
    history: History, tmp_path: Path
) -> None:
    """tools-reference.md gives it to every conversation, bot and routine run: a person's own
    Claude Code sessions are in the record whether or not Atlas runs executors (issue 37)."""
    bare = make_home(tmp_path / "bare")
    assert not any(s.enabled for s in bare.settings.executors.values())
    for kind in ("conversation", "bot", "routine"):
        assert delegation_search.unavailable_reason(run_context(bare, kind=kind)) is None
    assert delegation_search.unavailable_reason(run_context(bare, kind="subagent"))
    store = HomeStore(bare.db_path)
    try:  # the plugin's record of a session the person started (atlas/executors/desk_record.py)
        record = DelegationRecord(store)
        turn = await record.start_turn(
            "ex-own001", "claude-code", "claude-code@main", str(tmp_path),
            "rename the billing module", None, owner="person", files_before="",
        )  # fmt: skip
        await record.finish_turn(turn, "Renamed it to invoices.", "", None, "done")
    finally:
        await store.close()
    text = await search(run_context(bare), query="billing")
    assert "ex-own001" in text and "Renamed it to invoices." in text


async def test_the_record_keeps_sessions_finals_and_changes_once(tmp_path: Path) -> None:
    """A resumed turn goes on in the instance's session; a final told by `add` is not told
    twice; the session id comes off the workbench when the calls do not give it; the files a
    turn changed are those whose stat line moved."""
    home = make_home(tmp_path / "home")
    store = HomeStore(home.db_path)
    workbench = Workbench()
    record = DelegationRecord(store)
    record.follow(workbench)
    workbench.add(Instance("ex-1", "claude-code", "claude-code@main", tmp_path))
    try:
        first = await record.start_turn("ex-1", "claude-code", "claude-code@main", "/f", "a", None)
        workbench.update("ex-1", session_id="s-42")
        await record.add(first, "final", "done it")
        await record.finish_turn(first, "done it", " a.py | 1 +", None, "done")
        second = await record.start_turn(
            "ex-1", "claude-code", "claude-code@main", "/f", "b", None, files_before=" a.py | 1 +"
        )
        await record.finish_turn(second, "", " a.py | 1 +\n b.py (new)", None, "stopped")
        with pytest.raises(ValueError, match="unknown entry kind 'note'"):
            await record.add(second, "note", "x")

        def rows(db):  # type: ignore[no-untyped-def]
            turns = list(db.query("SELECT id, session_id, state FROM executor_turns"))
            entries = list(db.query("SELECT turn_id, kind, text FROM executor_entries"))
            return turns, entries

        turns, entries = await store.call(rows)
    finally:
        await store.close()
    assert turns == [
        {"id": first, "session_id": "s-42", "state": "done"},
        {"id": second, "session_id": "s-42", "state": "stopped"},
    ]
    assert [(e["turn_id"], e["kind"]) for e in entries] == [
        (first, "prompt"),
        (first, "final"),
        (first, "files"),
        (second, "prompt"),
        (second, "files"),
    ]
    assert entries[-1]["text"] == "changed: b.py"
    assert changed_files(" a.py | 1 +", " a.py | 3 ++-") == ["a.py"]
    assert changed_files(" a.py | 1 +", "") == ["a.py"]  # committed or undone by the turn


async def test_the_persons_own_sessions_are_the_main_agents_to_see(history: History) -> None:
    """A session the person started at the desk (owner person, no conversation), still running:
    the main agent finds it, another bot does not."""
    store = HomeStore(history.home.db_path)
    try:
        await DelegationRecord(store).start_turn(
            "ex-ddd444", "claude-code", "claude-code@work", str(history.app),
            "refactor the session cache", None, owner="person", session_id="sess-1",
        )  # fmt: skip
    finally:
        await store.close()
    text = await search(run_context(history.home), query="session cache")
    assert "## ex-ddd444 · claude-code@work" in text and "→ now · 1 turn(s), running" in text
    assert "the person's own" in text and "still running" in text
    assert "ex-ddd444" not in await search(run_context(history.home, bot="scout"))
