"""What Codex keeps in an account's CODEX_HOME, read back with no model call.

- `sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl`: the session log, one entry a line
  (`{"timestamp", "type", "payload"}`): `session_meta`, `response_item` (messages, function
  calls and their output), `event_msg` (among them `token_count`, which carries the plan's
  `rate_limits`: `primary` and `secondary` windows with `used_percent`, `window_minutes`,
  `resets_at`).
- `auth.json`: `tokens.id_token` (a JWT: `email`, and the ChatGPT plan under
  `https://api.openai.com/auth`), or `OPENAI_API_KEY` (an API key bills per token, no plan).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.executors.accounts import folders_of, limit_state, observed_windows, parse_time
from atlas.executors.base import (
    UNKNOWN,
    Account,
    AccountStatus,
    ExecutorError,
    LimitWindow,
    LogEntry,
    SessionLog,
)

if TYPE_CHECKING:
    from atlas.config import ExecutorSettings

log = logging.getLogger(__name__)
AUTH_CLAIMS = "https://api.openai.com/auth"
# What Codex itself puts in a user message (`<environment_context>...</environment_context>`,
# `<user_instructions>`...): not what the person or Atlas wrote.
INJECTED = re.compile(r"\s*<([a-z_ -]+)>.*</\1>\s*", re.DOTALL)
TAIL_BYTES = 256 * 1024  # the end of the newest log is enough to find its last token_count


def find_session(codex_home: Path, session_id: str) -> Path | None:
    if not re.fullmatch(r"[A-Za-z0-9_-]+", session_id):
        return None  # never a glob pattern from outside
    return next(iter(sorted((codex_home / "sessions").rglob(f"rollout-*{session_id}.jsonl"))), None)


def copy_session(source: Path, target: Path, session_id: str) -> Path:
    """The rollout copied to the same place under the other CODEX_HOME, for `exec resume`."""
    found = find_session(source, session_id)
    if found is None:
        raise ExecutorError(f"codex: session {session_id} is gone from {source}")
    copy = target / found.relative_to(source)
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found, copy)
    return copy


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(part.get("text", "")) for part in content or [] if isinstance(part, dict)
    ).strip()


def _entries(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None, datetime | None]]:
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("type") != "response_item":
            continue
        payload, at = line.get("payload") or {}, parse_time(line.get("timestamp"))
        kind = payload.get("type")
        if kind == "message" and payload.get("role") in ("user", "assistant"):
            text = _message_text(payload.get("content"))
            if text and not INJECTED.fullmatch(text):
                yield str(payload["role"]), text, None, at
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            arguments = payload.get("arguments") or payload.get("input") or payload.get("action")
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            yield "tool", text, str(payload.get("name") or kind), at
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = payload.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            yield "tool", text, "result", at


def session_log(codex_home: Path, session_id: str) -> SessionLog:
    path = find_session(codex_home, session_id)
    if path is None:
        return SessionLog(session_id, None, deleted=True)
    try:
        with path.open(encoding="utf-8", errors="replace") as file:
            found = list(_entries(iter(file)))
    except FileNotFoundError:
        return SessionLog(session_id, path, deleted=True)
    entries = tuple(
        LogEntry(index, role, text, at, tool) for index, (role, text, tool, at) in enumerate(found)
    )
    return SessionLog(session_id, path, entries)


def _claims(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified: only read to name the account, never trusted for access."""
    try:
        body = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (IndexError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _login(codex_home: Path) -> tuple[str, str, list[str]]:
    """(logged in as, plan, notes) from auth.json."""
    path = codex_home / "auth.json"
    try:
        auth = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "not logged in", UNKNOWN, [f"no {path}: `delegate action=account` to log in"]
    except (OSError, ValueError) as exc:
        return UNKNOWN, UNKNOWN, [f"{path} is unreadable: {exc}"]
    tokens = auth.get("tokens") or {}
    if tokens.get("id_token"):
        claims = _claims(str(tokens["id_token"]))
        plan = (claims.get(AUTH_CLAIMS) or {}).get("chatgpt_plan_type") or UNKNOWN
        return str(claims.get("email") or UNKNOWN), str(plan), []
    if auth.get("OPENAI_API_KEY"):
        return "API key", "api (billed per token)", []
    return "not logged in", UNKNOWN, [f"{path} holds no login"]


def _newest_rate_limits(codex_home: Path) -> dict[str, Any] | None:
    """The last `rate_limits` Codex wrote, from the end of its newest session log."""
    logs = sorted(
        (codex_home / "sessions").rglob("rollout-*.jsonl"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in logs[:5]:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - TAIL_BYTES))
            lines = file.read().decode("utf-8", errors="replace").splitlines()
        for raw in reversed(lines):
            if '"rate_limits"' not in raw:
                continue
            try:
                payload = json.loads(raw).get("payload") or {}
            except ValueError:
                continue
            limits = payload.get("rate_limits")
            if isinstance(limits, dict):
                return limits
    return None


def _windows(limits: Mapping[str, Any]) -> list[LimitWindow]:
    windows = []
    for name in ("primary", "secondary"):
        window = limits.get(name)
        if not isinstance(window, dict):
            continue
        minutes = window.get("window_minutes")
        used = window.get("used_percent")
        resets = window.get("resets_at")
        windows.append(
            LimitWindow(
                name=f"{name} ({minutes} min)" if minutes else name,
                used_percent=float(used) if isinstance(used, int | float) else None,
                resets_at=datetime.fromtimestamp(resets, UTC)
                if isinstance(resets, int | float)
                else None,
                status="rejected" if isinstance(used, int | float) and used >= 100 else "allowed",
            )
        )
    return windows


def account_status(
    settings: ExecutorSettings, account: Account, observed: Mapping[str, Any]
) -> AccountStatus:
    who, plan, notes = _login(account.config_dir)
    limits = _newest_rate_limits(account.config_dir)
    windows = _windows(limits) if limits else observed_windows(dict(observed))
    if not windows:
        notes.append("usage per window: unknown until a session has run (Codex's session logs)")
    at_limit, until = limit_state(dict(observed), windows)
    extra: bool | None = True if account.nickname in settings.extra_usage else None
    credits = (limits or {}).get("credits")
    if extra is None and isinstance(credits, dict) and "has_credits" in credits:
        extra = bool(credits.get("has_credits") or credits.get("unlimited"))
    if extra is None and who == "API key":
        extra = True
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
