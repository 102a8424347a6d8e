"""Why a harness's own session log is missing: deleted by the harness, or never written.

Claude Code deletes a session's log `cleanupPeriodDays` after it (30 by default, its
settings.json); Codex never deletes them. A log missing for a session younger than that was
never written where the account keeps them (the run ended before the harness saved it, or the
account's folder moved), and saying "the harness deleted it" would send the person looking for
a cleanup that never happened.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

CLAUDE_KEEPS_DAYS = 30  # Claude Code's default cleanupPeriodDays


def claude_keeps_days(config_dir: Path) -> int:
    """`cleanupPeriodDays` of the account's settings.json, else Claude Code's default."""
    try:
        settings = json.loads((config_dir / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return CLAUDE_KEEPS_DAYS
    days = settings.get("cleanupPeriodDays") if isinstance(settings, dict) else None
    return days if isinstance(days, int) and days >= 0 else CLAUDE_KEEPS_DAYS


def parse_started(value: object) -> datetime | None:
    """A recorded ISO time (UTC when it names no zone); None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def why_missing(
    harness: str,
    where: Path,
    started_at: datetime | None,
    keeps_days: int | None,
    now: datetime | None = None,
) -> str:
    """The sentence saying why the log of a session started at `started_at` is not in `where`."""
    now = now or datetime.now(UTC)
    age_days = (now - started_at).total_seconds() / 86400 if started_at else None
    if keeps_days is not None and (age_days is None or age_days >= keeps_days):
        return f"the harness deleted it ({harness} deletes sessions after {keeps_days} days)"
    if keeps_days is None:
        kept = f"{harness} does not delete its sessions"
    else:
        kept = f"the session is {age_days:.0f} days old and {harness} keeps them {keeps_days}"
    return (
        f"it was never written to {where} ({kept}): the run may have ended before the harness "
        "saved it, or the account's folder changed since"
    )
