"""What Claude Code keeps in an account's config folder, read back with no model call.

- `<dir>/projects/<the folder, each non-alphanumeric character a dash>/<session>.jsonl`: the
  session log, one entry a line (`user`, `assistant`, with `message.content` and `timestamp`).
  Claude Code deletes logs older than `cleanupPeriodDays` (30 by default).
- `<dir>/.claude.json` (`~/.claude.json` for the default `~/.claude`): `oauthAccount` with
  `emailAddress`. `<dir>/.credentials.json`: `claudeAiOauth.subscriptionType` (the plan).
- The plan's usage per window is not kept on disk: it is what Atlas saw in `rate_limit_event`s
  (atlas/executors/limits.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.executors.accounts import folders_of, limit_state, observed_windows, parse_time
from atlas.executors.base import (
    UNKNOWN,
    Account,
    AccountStatus,
    ExecutorError,
    LogEntry,
    SessionLog,
)

if TYPE_CHECKING:
    from atlas.config import ExecutorSettings

log = logging.getLogger(__name__)


def default_dir() -> Path:
    return Path(os.path.expanduser("~/.claude")).resolve()


def account_paths(config_dir: Path) -> tuple[Path, ...]:
    """What the harness writes for this account. The default folder keeps its account file
    beside it, in the home (`~/.claude.json`)."""
    if config_dir.resolve() == default_dir():
        return (config_dir, config_dir.parent / ".claude.json")
    return (config_dir,)


def claude_json(config_dir: Path) -> Path:
    inside = config_dir / ".claude.json"
    if inside.exists() or config_dir.resolve() != default_dir():
        return inside
    return config_dir.parent / ".claude.json"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("claude-code: %s is unreadable: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def project_key(folder: Path) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(folder))


def find_session(config_dir: Path, session_id: str, folder: Path | None) -> Path | None:
    projects = config_dir / "projects"
    if folder is not None:
        for candidate in (folder, folder.resolve()):
            path = projects / project_key(candidate) / f"{session_id}.jsonl"
            if path.exists():
                return path
    if not re.fullmatch(r"[A-Za-z0-9_-]+", session_id):
        return None  # never a glob pattern from outside
    return next(iter(projects.glob(f"*/{session_id}.jsonl")), None)


def copy_session(source: Path, target: Path, session_id: str, folder: Path) -> Path:
    """The session's log copied into the other account's folder, under the same folder's
    project, so `claude --resume` finds it there."""
    found = find_session(source, session_id, folder)
    if found is None:
        raise ExecutorError(f"claude-code: session {session_id} is gone from {source}")
    copy = target / "projects" / project_key(folder) / found.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found, copy)
    return copy


def _entries(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None, datetime | None]]:
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("type") not in ("user", "assistant"):
            continue  # queue operations, attachments, summaries
        if line.get("isMeta"):
            continue  # what Claude Code adds itself (caveats, command output)
        at = parse_time(line.get("timestamp"))
        content = (line.get("message") or {}).get("content")
        role = line["type"]
        if isinstance(content, str):
            yield role, content, None, at
            continue
        for block in content or []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                yield role, block["text"], None, at
            elif kind == "tool_use":
                yield "tool", json.dumps(block.get("input") or {}), str(block.get("name")), at
            elif kind == "tool_result":
                content = block.get("content")
                if isinstance(content, list):
                    content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
                yield "tool", str(content or ""), "result", at


def session_log(config_dir: Path, session_id: str, folder: Path | None) -> SessionLog:
    path = find_session(config_dir, session_id, folder)
    if path is None:
        return SessionLog(session_id, None, deleted=True)
    try:
        with path.open(encoding="utf-8", errors="replace") as file:
            found = list(_entries(iter(file)))
    except FileNotFoundError:  # deleted between the look and the read
        return SessionLog(session_id, path, deleted=True)
    entries = tuple(
        LogEntry(index, role, text, at, tool) for index, (role, text, tool, at) in enumerate(found)
    )
    return SessionLog(session_id, path, entries)


def account_status(
    settings: ExecutorSettings, account: Account, observed: Mapping[str, Any]
) -> AccountStatus:
    notes = []
    profile = _read_json(claude_json(account.config_dir)).get("oauthAccount") or {}
    credentials = _read_json(account.config_dir / ".credentials.json").get("claudeAiOauth") or {}
    if profile.get("emailAddress"):
        who = str(profile["emailAddress"])
    elif credentials:
        who = UNKNOWN
        notes.append("logged in, but the account file does not name the email")
    else:
        who = "not logged in"
        notes.append(f"no login in {account.config_dir}: `delegate action=account` to log in")
    plan = str(credentials.get("subscriptionType") or UNKNOWN)
    windows = observed_windows(dict(observed))
    if not windows:
        notes.append("usage per window: known once a task has run on it (Claude Code's events)")
    at_limit, until = limit_state(dict(observed), windows)
    extra: bool | None = True if account.nickname in settings.extra_usage else None
    if extra is None and isinstance(observed.get("extra_usage"), bool):
        extra = observed["extra_usage"]
    return AccountStatus(
        target=account.target,
        logged_in_as=who,
        plan=plan,
        windows=tuple(windows),
        at_limit=at_limit,
        at_limit_until=until,
        extra_usage=extra,
        folders=folders_of(settings, account),
        main=account.main,
        config_dir=str(account.config_dir),
        notes=tuple(notes),
    )
