"""Codex, run headless: `codex exec --json`, reading its JSONL events (docs/executors.md).

    codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -
    codex exec resume --json ... SESSION -

The prompt is read from stdin (`-`). Events, one a line (codex-rs/exec/src/exec_events.rs):
`thread.started` (thread_id: the session), `turn.started`, `item.started` / `item.updated` /
`item.completed` with an item of type agent_message, reasoning, command_execution,
file_change, mcp_tool_call, web_search, todo_list or error; `turn.completed` (usage),
`turn.failed` and `error` (message), `request_user_input` (questions).

Codex exec reads no input while it works, so a steer or an answer waits for the end of the turn
and goes on in `codex exec resume` (the instance does it by itself). It never asks before a
command: Atlas's sandbox is the containment, so Codex's own sandbox, which cannot nest inside
bubblewrap, is bypassed (what the flag is for: "environments that are externally sandboxed").
Each account is its own CODEX_HOME.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from atlas.executors import codex_files
from atlas.executors.base import (
    Account,
    AccountStatus,
    Answer,
    AssistantText,
    Decision,
    Executor,
    ExecutorError,
    ExecutorEvent,
    ExecutorInstance,
    Failure,
    LimitReached,
    Question,
    QuestionItem,
    Result,
    SessionLog,
    SessionStarted,
    TaskSpec,
    ToolResult,
    ToolUse,
    Usage,
)
from atlas.executors.process import HarnessInstance

LIMIT_TEXT = re.compile(r"usage limit|out of credits", re.IGNORECASE)
RETRY_IN = re.compile(r"try again in ((?:\d+\s*(?:days?|hours?|minutes?|seconds?)\s*)+)", re.I)
# Codex writes the reset as `%-I:%M %p` on the same day, else `%b %-d<suffix>, %Y %-I:%M %p`
# ("try again at Dec 8th, 2025 3:04 PM", codex-rs/core/src/error.rs), in local time.
RETRY_AT = re.compile(
    r"try again at (?:(?P<month>[A-Z][a-z]{2}) (?P<day>\d{1,2})(?:st|nd|rd|th)?, (?P<year>\d{4}) )?"
    r"(?P<hour>\d{1,2}):(?P<minute>\d{2})\s*(?P<half>[AP]M)",
    re.IGNORECASE,
)
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
UNITS = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}


def resets_from(message: str, now: datetime | None = None) -> datetime | None:
    """The reset time in a usage-limit message: `try again in 3 days 6 hours`, or `try again
    at 3:28 PM` (the machine's local time, the next such moment)."""
    now = now or datetime.now(UTC)
    if found := RETRY_IN.search(message):
        seconds = sum(
            int(amount) * UNITS[unit.lower()]
            for amount, unit in re.findall(
                r"(\d+)\s*(day|hour|minute|second)", found.group(1), re.I
            )
        )
        return now + timedelta(seconds=seconds)
    if found := RETRY_AT.search(message):
        return _reset_at(found, now)
    return None


def _reset_at(found: re.Match[str], now: datetime) -> datetime | None:
    """The moment a RETRY_AT match names: its date when it has one (a weekly limit resets days
    away), else the next such time of day. None for a date that does not exist."""
    hour, minute = int(found["hour"]) % 12, int(found["minute"])
    hour += 12 if found["half"].upper() == "PM" else 0
    local = now.astimezone()
    if found["month"] is None:
        moment = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if moment <= local:
            moment += timedelta(days=1)
        return moment.astimezone(UTC)
    month = found["month"].lower()
    if month not in MONTHS:
        return None
    try:
        moment = datetime(
            int(found["year"]), MONTHS.index(month) + 1, int(found["day"]), hour, minute
        ).astimezone()  # naive: the machine's local time, as Codex wrote it
    except ValueError:
        return None
    return moment.astimezone(UTC)


class CodexInstance(HarnessInstance):
    live_steering = False  # exec reads its prompt once: steers go on after the turn

    def __init__(self, task: TaskSpec, **kwargs: Any) -> None:
        super().__init__(task, **kwargs)
        self.last_text = ""
        self.started_items: set[str] = set()
        self.questions: dict[str, tuple[QuestionItem, ...]] = {}
        self.told_limit = False

    def run_argv(self, prompt: str, session_id: str | None) -> list[str]:
        flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        if self.task.model:
            flags += ["--model", self.task.model]
        if session_id:
            return [self.binary, "exec", "resume", *flags, session_id, "-"]
        return [self.binary, "exec", *flags, "-"]

    close_after_opening = True  # `-`: the prompt is all of stdin

    def opening(self, prompt: str) -> list[bytes]:
        return [prompt.encode()]

    # --- reading ------------------------------------------------------------------------------

    def parse(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        kind = line.get("type")
        if kind == "thread.started":
            return [SessionStarted(str(line["thread_id"]))]
        if kind in ("item.started", "item.completed"):
            return self._item(line.get("item") or {}, done=kind == "item.completed")
        if kind == "turn.completed":
            usage = line.get("usage") or {}
            text, self.last_text = self.last_text, ""
            return [
                Result(
                    text=text,
                    usage=Usage(
                        input_tokens=int(usage.get("input_tokens") or 0),
                        output_tokens=int(usage.get("output_tokens") or 0),
                        cache_read_tokens=int(usage.get("cached_input_tokens") or 0),
                    ),
                    session_id=self.session_id,
                )
            ]
        if kind == "turn.failed":
            return self._failure(str((line.get("error") or {}).get("message") or "codex failed"))
        if kind == "error":
            # Codex also says "Reconnecting... 2/5 (...)" this way and goes on: only a limit is
            # told at once; the rest is kept for the failure if the run ends without a turn.
            message = str(line.get("message") or "")
            if LIMIT_TEXT.search(message):
                return self._failure(message)
            self.last_error = message
            return []
        if kind == "request_user_input":
            return [self._question(line)]
        return []

    def _item(self, item: Mapping[str, Any], done: bool) -> list[ExecutorEvent]:
        kind, item_id = item.get("type"), str(item.get("id", ""))
        if kind == "agent_message" and done:
            self.last_text = str(item.get("text", ""))
            return [AssistantText(self.last_text)]
        if kind == "command_execution":
            use = ToolUse("command_execution", {"command": item.get("command", "")}, item_id)
            if not done:
                self.started_items.add(item_id)
                return [use]
            events: list[ExecutorEvent] = [] if item_id in self.started_items else [use]
            failed = item.get("status") in ("failed", "declined") or item.get("exit_code") not in (
                0,
                None,
            )
            return [*events, ToolResult(item_id, str(item.get("aggregated_output", "")), failed)]
        if kind == "file_change" and done:
            changes = [f"{c.get('kind')} {c.get('path')}" for c in item.get("changes") or []]
            failed = item.get("status") == "failed"
            return [
                ToolUse("file_change", {"changes": changes}, item_id),
                ToolResult(item_id, str(item.get("status", "")), failed),
            ]
        if kind == "mcp_tool_call":
            name = f"mcp:{item.get('server')}/{item.get('tool')}"
            if not done:
                self.started_items.add(item_id)
                return [ToolUse(name, dict(item.get("arguments") or {}), item_id)]
            error = (item.get("error") or {}).get("message")
            output = error or json.dumps((item.get("result") or {}).get("content") or [])
            return [ToolResult(item_id, output, bool(error))]
        if kind == "web_search" and done:
            return [ToolUse("web_search", {"query": item.get("query", "")}, item_id)]
        return []  # reasoning, todo_list, plan, non-fatal error items

    def _failure(self, message: str) -> list[ExecutorEvent]:
        if LIMIT_TEXT.search(message):
            if self.told_limit:  # `error` then `turn.failed` say it twice
                return []
            self.told_limit = True
            resets = resets_from(message)
            if self.book is not None:
                self.book.note_limit(self.account.target, message, resets, None)
            return [LimitReached(message, resets)]
        return [Failure(message)]

    def _question(self, line: Mapping[str, Any]) -> Question:
        request_id = str(line.get("call_id") or line.get("id"))
        items = tuple(
            QuestionItem(
                question=str(q.get("question", "")),
                choices=tuple(
                    str(o.get("label", o) if isinstance(o, dict) else o)
                    for o in q.get("options") or []
                ),
                header=str(q.get("header", "")),
            )
            for q in line.get("questions") or []
        )
        self.questions[request_id] = items
        return Question(request_id, items)

    async def answer(self, request_id: str, answer: Answer) -> None:
        """Codex exec takes no answer while it runs: the answer goes on after the turn, in the
        same session, as the next message."""
        if request_id not in self.questions:
            raise ExecutorError(f"no open question {request_id!r}")
        if isinstance(answer, Decision):
            raise ExecutorError("codex exec asks no permission: answer its question with text")
        del self.questions[request_id]
        text = "\n".join(f"{question}: {reply}" for question, reply in answer.items())
        await self.steer(f"Answers to your questions:\n{text}")


class CodexExecutor(Executor):
    name = "codex"
    default_binary = "codex"
    default_config_dir = "~/.codex"
    config_env = "CODEX_HOME"
    provider_hosts = ("api.openai.com", "*.openai.com", "chatgpt.com", "*.chatgpt.com")

    async def start(self, task: TaskSpec) -> ExecutorInstance:
        if task.account.executor != self.name:
            raise ExecutorError(f"{task.account.target} is not an account of {self.name}")
        self.check_binary()
        env = self.account_env(task.account)
        hosts = (*self.provider_hosts, *self.settings.allowed_domains)
        return CodexInstance(
            task, binary=self.binary, env=env, hosts=hosts, launcher=self.launcher, book=self.book
        )

    def version_argv(self) -> list[str]:
        return [self.binary, "--version"]

    def login_argv(self, account: Account, email: str | None = None) -> list[str]:
        # A device code: a link and a code to enter on any browser (the person's phone).
        return [self.binary, "login", "--device-auth"]

    def copy_session(self, source: Account, target: Account, session_id: str, folder: Path) -> None:
        codex_files.copy_session(source.config_dir, target.config_dir, session_id)

    def session_log(self, account: Account, session_id: str, folder: Path | None) -> SessionLog:
        return codex_files.session_log(account.config_dir, session_id)

    def account_status(self, account: Account, observed: Mapping[str, Any]) -> AccountStatus:
        return codex_files.account_status(self.settings, account, observed)
