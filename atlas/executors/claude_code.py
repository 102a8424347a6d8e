"""Claude Code, run headless: `claude -p` speaking stream-json both ways (docs/executors.md).

    claude -p --input-format stream-json --output-format stream-json --verbose
           --replay-user-messages --permission-prompt-tool stdio [--resume SESSION]

The prompt goes in on stdin as a user message; the harness answers with one JSON object a
line: `system/init` (the session id), `assistant` (text and tool_use blocks), `user`
(tool_result blocks, and the echo of each user message it took), `rate_limit_event` (the
plan's windows) and `result` (usage, total_cost_usd, is_error, subtype). With
`--permission-prompt-tool stdio` it asks before a tool runs with a `control_request`
(`can_use_tool`; AskUserQuestion is a question to the person) and waits for our
`control_response`. Steering writes another user message into the running turn; after the
turn's result, stdin is closed and later steers resume the session (`--resume`).

Each account is its own CLAUDE_CONFIG_DIR: its login, settings and session logs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from atlas.executors import claude_files
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
    PermissionRequest,
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

# "You've hit your session limit · resets 3pm (UTC)"; older: "Claude AI usage limit reached|1749924000"
LIMIT_TEXT = re.compile(
    r"(you've hit your .*limit|you've reached your .*limit|usage limit reached|"
    r"out of usage credits)",
    re.IGNORECASE,
)
LOGIN_TEXT = re.compile(r"not logged in|invalid api key|please run /login", re.IGNORECASE)
EPOCH_SUFFIX = re.compile(r"\|(\d{9,11})\b")
QUESTION_TOOL = "AskUserQuestion"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block.get("text", "") if isinstance(block, dict) else str(block) for block in content
        ]
        return "\n".join(part for part in parts if part)
    return "" if content is None else json.dumps(content)


def _usage(raw: Mapping[str, Any] | None) -> Usage:
    raw = raw or {}
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(raw.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_creation_input_tokens") or 0),
    )


def _epoch(value: Any) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if isinstance(value, int | float) else None


class ClaudeCodeInstance(HarnessInstance):
    live_steering = True

    def __init__(self, task: TaskSpec, **kwargs: Any) -> None:
        super().__init__(task, **kwargs)
        self.requests: dict[str, Mapping[str, Any]] = {}  # request_id -> can_use_tool request
        self.rejected: Mapping[str, Any] | None = None  # the last rate_limit_info rejecting us

    def run_argv(self, prompt: str, session_id: str | None) -> list[str]:
        argv = [
            self.binary,
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--replay-user-messages",
            "--permission-prompt-tool",
            "stdio",
        ]
        if self.task.model:
            argv += ["--model", self.task.model]
        if self.task.permission_mode:
            argv += ["--permission-mode", self.task.permission_mode]
        if session_id:
            argv += ["--resume", session_id]
        return argv

    def user_message(self, text: str) -> list[bytes]:
        line = {
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": None,
            "session_id": self.session_id or "",
        }
        return [json.dumps(line).encode() + b"\n"]

    def opening(self, prompt: str) -> list[bytes]:
        return self.user_message(prompt)

    # --- reading ------------------------------------------------------------------------------

    def parse(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        kind = line.get("type")
        if kind == "system" and line.get("subtype") == "init":
            return [SessionStarted(str(line["session_id"]), line.get("model"))]
        if kind == "assistant":
            return self._assistant(line)
        if kind == "user":
            return self._user(line)
        if kind == "control_request":
            return self._control(line)
        if kind == "rate_limit_event":
            self._rate_limit(line.get("rate_limit_info") or {})
            return []
        if kind == "result":
            return [self._result(line)]
        return []  # stream_event, control_response, other system lines: nothing to tell

    def _assistant(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        events: list[ExecutorEvent] = []
        for block in (line.get("message") or {}).get("content") or []:
            if block.get("type") == "text" and block.get("text"):
                events.append(AssistantText(block["text"]))
            elif block.get("type") == "tool_use" and block.get("name") != QUESTION_TOOL:
                events.append(ToolUse(block["name"], block.get("input") or {}, block.get("id", "")))
        return events

    def _user(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        content = (line.get("message") or {}).get("content")
        if isinstance(content, str):
            self.acknowledge(content)  # the echo of a message we wrote
            return []
        events: list[ExecutorEvent] = []
        for block in content or []:
            if block.get("type") == "tool_result":
                output = _text_of(block.get("content"))
                events.append(
                    ToolResult(block.get("tool_use_id", ""), output, bool(block.get("is_error")))
                )
            elif block.get("type") == "text":
                self.acknowledge(block.get("text", ""))
        return events

    def _control(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        request = line.get("request") or {}
        request_id = str(line.get("request_id"))
        if request.get("subtype") != "can_use_tool":
            return []
        self.requests[request_id] = request
        tool, data = str(request.get("tool_name")), request.get("input") or {}
        if tool == QUESTION_TOOL:
            items = tuple(
                QuestionItem(
                    question=str(item.get("question", "")),
                    choices=tuple(str(o.get("label", "")) for o in item.get("options") or []),
                    multi_select=bool(item.get("multiSelect")),
                    header=str(item.get("header", "")),
                )
                for item in data.get("questions") or []
            )
            return [Question(request_id, items)]
        return [
            PermissionRequest(request_id, tool, data, str(request.get("decision_reason") or ""))
        ]

    def _rate_limit(self, info: Mapping[str, Any]) -> None:
        window = str(info.get("rateLimitType") or "unknown")
        status = str(info.get("status") or "unknown")
        if self.book is not None:
            used = info.get("utilization")
            self.book.note_window(
                self.account.target,
                window,
                {
                    "status": "warning" if status == "allowed_warning" else status,
                    "resets_at": info.get("resetsAt"),
                    "used_percent": used * 100 if isinstance(used, int | float) else None,
                },
            )
            if "overageStatus" in info:
                self.book.note_overage(self.account.target, info["overageStatus"] != "rejected")
        billing_past = info.get("isUsingOverage") or info.get("overageStatus") in (
            "allowed",
            "allowed_warning",
        )
        if status == "rejected" and not billing_past:
            self.rejected = info

    def _result(self, line: dict[str, Any]) -> ExecutorEvent:
        text = line.get("result")
        if not isinstance(text, str) or (line.get("is_error") and not text.strip()):
            # An error result often carries an empty `result`: its subtype (error_max_turns,
            # error_during_execution) and `errors` are then all that says what went wrong.
            errors = "; ".join(str(e) for e in line.get("errors") or [])
            subtype = str(line.get("subtype") or "error")
            text = f"{subtype}: {errors}" if errors else subtype
        if line.get("is_error") and LOGIN_TEXT.search(text):
            return Failure(
                f"{self.account.target}: {text} (log it in: `CLAUDE_CONFIG_DIR="
                f"{self.account.config_dir} claude`, then /login; docs/executors.md)"
            )
        if line.get("is_error") and (self.rejected is not None or LIMIT_TEXT.search(text)):
            info = self.rejected or {}
            resets = _epoch(info.get("resetsAt"))
            if resets is None and (found := EPOCH_SUFFIX.search(text)):
                resets = _epoch(int(found.group(1)))
            window = info.get("rateLimitType")
            limit = LimitReached(text, resets, window)
            if self.book is not None:
                self.book.note_limit(self.account.target, text, resets, window)
            return limit
        return Result(
            text=text,
            is_error=bool(line.get("is_error")),
            usage=_usage(line.get("usage")),
            cost_usd=line.get("total_cost_usd"),
            session_id=line.get("session_id"),
            turns=line.get("num_turns"),
            subtype=str(line.get("subtype") or "success"),
        )

    # --- answering ----------------------------------------------------------------------------

    async def answer(self, request_id: str, answer: Answer) -> None:
        request = self.requests.pop(request_id, None)
        if request is None:
            raise ExecutorError(f"no open question or permission request {request_id!r}")
        original = dict(request.get("input") or {})
        if isinstance(answer, Decision):
            if answer.allow:
                updated = dict(answer.updated_input) if answer.updated_input else original
                response: dict[str, Any] = {"behavior": "allow", "updatedInput": updated}
            else:
                response = {"behavior": "deny", "message": answer.message or "denied by the person"}
        else:  # AskUserQuestion: the answers go back in the tool's input
            response = {"behavior": "allow", "updatedInput": {**original, "answers": dict(answer)}}
        await self.write_json(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": response},
            }
        )


class ClaudeCodeExecutor(Executor):
    name = "claude-code"
    default_binary = "claude"
    default_config_dir = "~/.claude"
    config_env = "CLAUDE_CONFIG_DIR"
    provider_hosts = (
        "api.anthropic.com",
        "*.anthropic.com",
        "claude.ai",
        "*.claude.ai",
        "*.claude.com",
    )

    async def start(self, task: TaskSpec) -> ExecutorInstance:
        if task.account.executor != self.name:
            raise ExecutorError(f"{task.account.target} is not an account of {self.name}")
        self.check_binary()
        # The binary is the person's to update, not a task's. ATLAS_OWN_RUN: Atlas's plugin
        # (claude_plugin/hooks/atlas_hook.py), if installed in this account, leaves the run alone.
        env = {"DISABLE_AUTOUPDATER": "1", "ATLAS_OWN_RUN": "1", **self.account_env(task.account)}
        paths = claude_files.account_paths(task.account.config_dir)
        hosts = (*self.provider_hosts, *self.settings.allowed_domains)
        return ClaudeCodeInstance(
            task,
            binary=self.binary,
            env=env,
            hosts=hosts,
            launcher=self.launcher,
            book=self.book,
            account_paths=paths,
        )

    def version_argv(self) -> list[str]:
        return [self.binary, "--version"]

    def account_env(self, account: Account) -> dict[str, str]:
        if len(claude_files.account_paths(account.config_dir)) > 1:
            return {}  # the default folder: found without it (and ~/.claude.json with it)
        return {self.config_env: str(account.config_dir)}

    # `claude auth login` with no browser to open prints the link, then waits for the code
    # the page shows after sign-in: "Paste code here if prompted > " (no newline).
    login_code_prompt = re.compile(r"paste (?:the )?code", re.IGNORECASE)

    def login_argv(self, account: Account, email: str | None = None) -> list[str]:
        return [self.binary, "auth", "login", "--claudeai", *(["--email", email] if email else [])]

    def copy_session(self, source: Account, target: Account, session_id: str, folder: Path) -> None:
        claude_files.copy_session(source.config_dir, target.config_dir, session_id, folder)

    def session_log(self, account: Account, session_id: str, folder: Path | None) -> SessionLog:
        return claude_files.session_log(account.config_dir, session_id, folder)

    def keeps_sessions_days(self, account: Account) -> int | None:
        from atlas.executors.session_gone import claude_keeps_days

        return claude_keeps_days(account.config_dir)

    def account_status(self, account: Account, observed: Mapping[str, Any]) -> AccountStatus:
        return claude_files.account_status(self.settings, account, observed)
