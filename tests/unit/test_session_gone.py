"""A missing session log is said deleted only when the harness could have deleted it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from atlas.executors.session_gone import claude_keeps_days, parse_started, why_missing

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)


def test_a_log_older_than_the_harness_keeps_them_was_deleted(tmp_path: Path) -> None:
    why = why_missing("claude-code", tmp_path, NOW - timedelta(days=31), 30, NOW)
    assert why == "the harness deleted it (claude-code deletes sessions after 30 days)"


def test_a_young_log_that_is_missing_was_never_written(tmp_path: Path) -> None:
    why = why_missing("claude-code", tmp_path, NOW - timedelta(days=2), 30, NOW)
    assert why.startswith(f"it was never written to {tmp_path}")
    assert "2 days old and claude-code keeps them 30" in why and "deleted" not in why
    never = why_missing("codex", tmp_path, NOW - timedelta(days=90), None, NOW)
    assert "never written" in never and "codex does not delete its sessions" in never


def test_claude_keeps_sessions_as_its_settings_say(tmp_path: Path) -> None:
    assert claude_keeps_days(tmp_path) == 30
    (tmp_path / "settings.json").write_text(json.dumps({"cleanupPeriodDays": 7}))
    assert claude_keeps_days(tmp_path) == 7
    (tmp_path / "settings.json").write_text("{broken")
    assert claude_keeps_days(tmp_path) == 30


def test_recorded_times_are_read_as_utc() -> None:
    assert parse_started("2026-12-01T09:00:00") == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert parse_started("2026-12-01T09:00:00.000001+00:00") is not None
    assert parse_started(None) is None and parse_started("yesterday") is None
