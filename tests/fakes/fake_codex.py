#!/usr/bin/env python3
"""A fake `codex` for tests: `codex exec --json`'s JSONL events, from scripted scenarios.

Speaks what atlas/executors/codex.py runs: `codex exec --json [flags] -` and
`codex exec resume --json [flags] SESSION -` (the prompt on stdin), `codex --version` and
`codex login --device-auth` (prints a link and a code).
Prints the events of codex-rs/exec/src/exec_events.rs: thread.started, turn.started,
item.started / item.completed (agent_message, command_execution, file_change), turn.completed
with usage, turn.failed, error, request_user_input. Keeps a session log where Codex does
(`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`, with token_count rate limits).

The scenario: $FAKE_CODEX_SCENARIO, else the file `fake-scenario` in CODEX_HOME, else
`success`. Scenarios: success, question, limit, slow (runs until killed), crash.
Standard library only: it runs inside the sandbox.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

VERSION = "codex-cli 0.171.0"


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def scenario() -> str:
    named = os.environ.get("FAKE_CODEX_SCENARIO")
    if named:
        return named
    path = codex_home() / "fake-scenario"
    return path.read_text().strip() if path.exists() else "success"


def emit(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


class Rollout:
    def __init__(self, thread_id: str, resumed: bool) -> None:
        found = sorted((codex_home() / "sessions").rglob(f"rollout-*{thread_id}.jsonl"))
        folder = codex_home() / "sessions" / "2026" / "12" / "04"
        self.path = found[0] if found else folder / f"rollout-2026-12-04T09-00-00-{thread_id}.jsonl"
        self.earlier = len(self.path.read_text().splitlines()) if self.path.exists() else 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not resumed:
            self.write(
                "session_meta", {"id": thread_id, "cwd": os.getcwd(), "cli_version": "0.171.0"}
            )

    def write(self, kind: str, payload: dict) -> None:
        with self.path.open("a") as file:
            file.write(
                json.dumps(
                    {"timestamp": "2026-12-04T09:00:00.000Z", "type": kind, "payload": payload}
                )
                + "\n"
            )

    def message(self, role: str, text: str) -> None:
        kind = "input_text" if role == "user" else "output_text"
        self.write(
            "response_item",
            {"type": "message", "role": role, "content": [{"type": kind, "text": text}]},
        )

    def rate_limits(self, used: float) -> None:
        resets = int(time.time()) + 9000
        limits = {
            "limit_id": "codex",
            "primary": {"used_percent": used, "window_minutes": 300, "resets_at": resets},
            "secondary": {
                "used_percent": 40.0,
                "window_minutes": 10080,
                "resets_at": resets + 86400,
            },
            "credits": {"has_credits": False, "unlimited": False, "balance": "0"},
            "plan_type": "plus",
        }
        self.write("event_msg", {"type": "token_count", "info": None, "rate_limits": limits})


def agent_message(rollout: Rollout, text: str) -> None:
    emit(
        {
            "type": "item.completed",
            "item": {"id": f"item_{uuid.uuid4().hex[:6]}", "type": "agent_message", "text": text},
        }
    )
    rollout.message("assistant", text)


def command(rollout: Rollout, line: str, output: str, code: int = 0) -> None:
    item_id = f"item_{uuid.uuid4().hex[:6]}"
    emit(
        {
            "type": "item.started",
            "item": {
                "id": item_id,
                "type": "command_execution",
                "command": line,
                "aggregated_output": "",
                "exit_code": None,
                "status": "in_progress",
            },
        }
    )
    rollout.write(
        "response_item",
        {
            "type": "function_call",
            "name": "shell",
            "arguments": json.dumps({"command": ["bash", "-lc", line]}),
            "call_id": item_id,
        },
    )
    emit(
        {
            "type": "item.completed",
            "item": {
                "id": item_id,
                "type": "command_execution",
                "command": line,
                "aggregated_output": output,
                "exit_code": code,
                "status": "completed" if code == 0 else "failed",
            },
        }
    )
    rollout.write(
        "response_item", {"type": "function_call_output", "call_id": item_id, "output": output}
    )


def completed() -> None:
    emit(
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 2400, "cached_input_tokens": 2000, "output_tokens": 310},
        }
    )


def main(argv: list[str]) -> int:
    if "--version" in argv or "-V" in argv:
        print(VERSION)
        return 0
    if argv[:1] == ["login"]:  # the device-code login, as `codex login --device-auth` prints it
        print("Follow these steps to sign in with ChatGPT using device code authorization:")
        print("1. Open this link in your browser: https://auth.openai.com/codex/device")
        print("2. Enter this one-time code: FAKE-1234", flush=True)
        time.sleep(0.5)  # the person signs in
        return 0
    if argv[:1] != ["exec"] or "--json" not in argv or argv[-1] != "-":
        print(f"fake codex: unexpected arguments {argv}", file=sys.stderr)
        return 2
    resume = argv[argv.index("-") - 1] if argv[1:2] == ["resume"] else None
    thread_id = resume or str(uuid.uuid4())
    rollout = Rollout(thread_id, resumed=resume is not None)
    if resume and not rollout.earlier:
        emit(
            {
                "type": "error",
                "message": f"thread/resume failed: no rollout found for thread id {resume}",
            }
        )
        return 1
    prompt = sys.stdin.read()
    emit({"type": "thread.started", "thread_id": thread_id})
    emit({"type": "turn.started"})
    rollout.message("user", prompt)
    opening = f"resumed {thread_id} ({rollout.earlier} earlier entries): " if resume else ""
    name = "success" if resume else scenario()
    if name == "question":
        emit(
            {
                "type": "request_user_input",
                "id": "turn_1",
                "call_id": "call_q1",
                "questions": [
                    {
                        "id": "db",
                        "header": "DB",
                        "question": "Which database?",
                        "options": [
                            {"label": "sqlite", "description": "a file"},
                            {"label": "postgres", "description": "a server"},
                        ],
                    }
                ],
            }
        )
        agent_message(rollout, "I need to know which database to use.")
        rollout.rate_limits(10.0)
        completed()
    elif name == "limit":
        command(rollout, "pytest -q", "1 failed")
        rollout.rate_limits(100.0)
        message = "You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again in 2 hours 30 minutes."
        emit({"type": "error", "message": message})
        emit({"type": "turn.failed", "error": {"message": message}})
        return 1
    elif name == "slow":
        agent_message(rollout, "Working slowly.")
        time.sleep(120)
    elif name == "crash":
        print("Error: the fake crashed", file=sys.stderr)
        return 3
    else:
        command(rollout, "ls", "app.py\n")
        Path("fake-codex-output.txt").write_text(prompt)
        emit(
            {
                "type": "item.completed",
                "item": {
                    "id": "item_fc",
                    "type": "file_change",
                    "changes": [{"path": "fake-codex-output.txt", "kind": "add"}],
                    "status": "completed",
                },
            }
        )
        agent_message(rollout, f"{opening}Done: {prompt}")
        rollout.rate_limits(25.0)
        completed()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
