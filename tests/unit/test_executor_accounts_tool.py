"""executor_accounts over a recorded history: the accounts' files and what Atlas observed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from atlas.executors.limits import LimitBook
from atlas.tools.executors import executor_accounts
from tests.helpers import BASE_CONFIG, make_home, run_context


def home_with_executors(tmp_path: Path):  # type: ignore[no-untyped-def]
    work, codex = tmp_path / "claude-work", tmp_path / "codex"
    work.mkdir()
    (work / ".claude.json").write_text(
        json.dumps({"oauthAccount": {"emailAddress": "me@work.example"}})
    )
    (work / ".credentials.json").write_text(
        json.dumps({"claudeAiOauth": {"subscriptionType": "max"}})
    )
    config = (
        BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
        + f"""
[executors.claude-code]
enabled = true
accounts = {{ main = "{tmp_path / "claude-main"}", work = "{work}" }}
folders = {{ "~/src/app" = "work" }}
hand_over = ["claude-code@main", "codex"]
extra_usage = ["work"]

[executors.codex]
enabled = true
accounts = {{ main = "{codex}" }}
"""
    )
    return make_home(tmp_path / "home", config=config)


async def test_executor_accounts_reads_files_and_what_was_observed(tmp_path: Path) -> None:
    home = home_with_executors(tmp_path)
    resets = datetime.now(UTC) + timedelta(hours=3)
    book = LimitBook.for_home(home.root)
    book.note_window(
        "claude-code@work",
        "five_hour",
        {"status": "rejected", "resets_at": resets.timestamp(), "used_percent": 100},
    )
    book.note_limit("claude-code@work", "You've hit your session limit", resets, "five_hour")
    run = run_context(home)
    assert executor_accounts.unavailable_reason(run) is None
    result = await executor_accounts.invoke(run, {})
    assert not result.is_error, result.text
    text = result.text
    work = text.split("claude-code@work", 1)[1].split("\n\n")[0]
    assert "logged in as: me@work.example; plan: max" in work
    assert "five_hour: 100% used, rejected" in work
    assert f"at its limit: yes (until {resets.isoformat(timespec='minutes')})" in work
    assert "bills past it: yes" in work and "folders: ~/src/app" in work
    main = text.split("claude-code@main (main)", 1)[1].split("claude-code@work")[0]
    assert "logged in as: not logged in" in main and "at its limit: unknown" in main
    assert "usage per window: unknown" in main
    assert "accounts take over at a limit in this order: claude-code@main, codex" in text
    assert "codex@main (main)" in text

    only = await executor_accounts.invoke(run, {"executor": "codex"})
    assert "codex@main" in only.text and "claude-code" not in only.text
    unknown = await executor_accounts.invoke(run, {"executor": "aider"})
    assert unknown.is_error and "no [executors.aider] table" in unknown.text


async def test_executor_accounts_is_offered_only_with_an_executor_where_delegate_is(
    tmp_path: Path,
) -> None:
    home = home_with_executors(tmp_path)
    assert executor_accounts.unavailable_reason(run_context(home, kind="subagent"))
    bare = make_home(tmp_path / "bare")
    reason = executor_accounts.unavailable_reason(run_context(bare))
    assert reason is not None and "[executors.claude-code]" in reason
