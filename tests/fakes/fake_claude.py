#!/usr/bin/env python3
"""A fake `claude` for tests: Claude Code's headless stream-json, from scripted scenarios.

Speaks what atlas/executors/claude_code.py runs: `claude -p --input-format stream-json
--output-format stream-json --verbose --replay-user-messages --permission-prompt-tool stdio
[--resume SESSION] [--model M]`, and `claude --version`. Reads user messages and control
responses on stdin, one JSON object a line, and prints the documented events: system/init,
assistant (text, tool_use), user (tool_result, the replay of each message), control_request
(can_use_tool), rate_limit_event, result. Keeps a session log where Claude Code does
(`$CLAUDE_CONFIG_DIR/projects/<folder>/<session>.jsonl`), so resume and read-back work.

The scenario: $FAKE_CLAUDE_SCENARIO, else the file `fake-scenario` in the config folder, else
`success`. Scenarios: success, question, permission, limit, steer, slow (runs until killed),
crash (exits 3 with no result), probe (tries the paths the prompt names, for sandbox tests),
fetch (gets the URLs the prompt lists through the sandbox's proxy). Standard library only: it runs inside the sandbox.
"""

from __future__ import annotations

import json
import os
import re
import select
import sys
import time
import uuid
from pathlib import Path

VERSION = "2.1.197 (Claude Code)"


def config_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def scenario() -> str:
    named = os.environ.get("FAKE_CLAUDE_SCENARIO")
    if named:
        return named
    path = config_dir() / "fake-scenario"
    return path.read_text().strip() if path.exists() else "success"


class Session:
    def __init__(self, session_id: str, resumed: bool) -> None:
        key = re.sub(r"[^A-Za-z0-9]", "-", os.getcwd())
        self.id = session_id
        self.log = config_dir() / "projects" / key / f"{session_id}.jsonl"
        self.resumed = resumed
        self.earlier = len(self.log.read_text().splitlines()) if self.log.exists() else 0
        self.log.parent.mkdir(parents=True, exist_ok=True)

    def record(self, kind: str, content: object) -> None:
        entry = {
            "type": kind,
            "sessionId": self.id,
            "timestamp": "2026-12-04T09:00:00.000Z",
            "message": {"role": kind, "content": content},
        }
        with self.log.open("a") as file:
            file.write(json.dumps(entry) + "\n")


def emit(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def read_line(timeout: float | None = None) -> dict | None:
    """The next JSON line on stdin; None at its end (or when `timeout` passes)."""
    if timeout is not None:
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        if not ready:
            return None
    raw = sys.stdin.readline()
    if not raw:
        return None
    return json.loads(raw) if raw.strip() else read_line(timeout)


def read_user(session: Session, timeout: float | None = None) -> str | None:
    """The next user message (replayed on stdout, as --replay-user-messages does)."""
    while True:
        line = read_line(timeout)
        if line is None:
            return None
        if line.get("type") != "user":
            continue
        text = line["message"]["content"]
        emit(
            {
                "type": "user",
                "message": {"role": "user", "content": text},
                "session_id": session.id,
                "isReplay": True,
            }
        )
        session.record("user", text)
        return text


def say(session: Session, text: str) -> None:
    content = [{"type": "text", "text": text}]
    emit(
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": content},
            "session_id": session.id,
        }
    )
    session.record("assistant", content)


def tool(session: Session, name: str, data: dict, output: str, is_error: bool = False) -> str:
    tool_id = f"toolu_{uuid.uuid4().hex[:12]}"
    use = [{"type": "tool_use", "id": tool_id, "name": name, "input": data}]
    emit(
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": use},
            "session_id": session.id,
        }
    )
    session.record("assistant", use)
    if output is not None:
        tool_result(session, tool_id, output, is_error)
    return tool_id


def tool_result(session: Session, tool_id: str, output: str, is_error: bool = False) -> None:
    block = [
        {"type": "tool_result", "tool_use_id": tool_id, "content": output, "is_error": is_error}
    ]
    emit({"type": "user", "message": {"role": "user", "content": block}, "session_id": session.id})
    session.record("user", block)


def result(session: Session, text: str, *, is_error: bool = False, turns: int = 1) -> None:
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": is_error,
            "duration_ms": 1200,
            "duration_api_ms": 1000,
            "num_turns": turns,
            "result": text,
            "stop_reason": "end_turn",
            "session_id": session.id,
            "total_cost_usd": 0.0123,
            "usage": {
                "input_tokens": 120,
                "output_tokens": 45,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 10,
            },
            "modelUsage": {},
            "permission_denials": [],
            "uuid": str(uuid.uuid4()),
        }
    )


def ask(request_type: str, tool_name: str, data: dict) -> dict:
    """A can_use_tool control request; waits for its control_response."""
    request_id = f"req_{uuid.uuid4().hex[:8]}"
    emit(
        {
            "type": "control_request",
            "request_id": request_id,
            "request": {
                "subtype": request_type,
                "tool_name": tool_name,
                "input": data,
                "tool_use_id": "toolu_x",
            },
        }
    )
    while True:
        line = read_line()
        if line is None:
            sys.exit(1)
        if line.get("type") == "control_response" and line["response"]["request_id"] == request_id:
            return line["response"]["response"]


def turn(session: Session, prompt: str, name: str) -> None:
    opening = (
        f"resumed {session.id} ({session.earlier} earlier entries): " if session.resumed else ""
    )
    if name == "question":
        questions = [
            {
                "question": "Which database?",
                "header": "DB",
                "multiSelect": False,
                "options": [
                    {"label": "sqlite", "description": "a file"},
                    {"label": "postgres", "description": "a server"},
                ],
            }
        ]
        answer = ask("can_use_tool", "AskUserQuestion", {"questions": questions})
        chosen = answer["updatedInput"]["answers"]["Which database?"]
        say(session, f"Using {chosen}.")
        result(session, f"{opening}Set up {chosen}.")
    elif name == "permission":
        tool_id = tool(session, "Bash", {"command": "make deploy"}, None)  # type: ignore[arg-type]
        answer = ask("can_use_tool", "Bash", {"command": "make deploy"})
        if answer["behavior"] == "allow":
            tool_result(session, tool_id, "deployed")
            result(session, f"{opening}Deployed.")
        else:
            tool_result(session, tool_id, f"Permission denied: {answer.get('message')}", True)
            result(session, f"{opening}Not deployed: {answer.get('message')}")
    elif name == "limit":
        say(session, "Starting on it.")
        tool(session, "Edit", {"file_path": "app.py"}, "edited")
        resets = int(time.time()) + 3600
        emit(
            {
                "type": "rate_limit_event",
                "rate_limit_info": {
                    "status": "rejected",
                    "resetsAt": resets,
                    "rateLimitType": "five_hour",
                    "utilization": 1.0,
                    "overageStatus": "rejected",
                    "overageDisabledReason": "org_level_disabled",
                    "isUsingOverage": False,
                },
                "uuid": str(uuid.uuid4()),
                "session_id": session.id,
            }
        )
        message = "You've hit your session limit · resets 3pm (UTC)"
        say(session, message)
        result(session, message, is_error=True)
    elif name == "slow":
        say(session, "Working slowly.")
        time.sleep(120)
    elif name == "probe":  # what the sandbox lets it see: the prompt names paths to try
        wanted = json.loads(prompt)
        seen = {"env": {k: os.environ.get(k) for k in wanted.get("env", [])}}
        for path in wanted.get("read", []):
            try:
                if os.path.isdir(path):
                    seen[f"read {path}"] = "ok" if os.listdir(path) else "empty"
                else:
                    seen[f"read {path}"] = "ok" if Path(path).read_text() else "empty"
            except OSError as exc:
                seen[f"read {path}"] = type(exc).__name__
        for path in wanted.get("write", []):
            try:
                Path(path).write_text("x")
                seen[f"write {path}"] = "ok"
            except OSError as exc:
                seen[f"write {path}"] = type(exc).__name__
        result(session, json.dumps(seen))
    elif name == "fetch":  # the network, as the harness reaches its provider: via the proxy
        import urllib.request

        for name in ("NO_PROXY", "no_proxy"):  # even localhost goes through the proxy here
            os.environ.pop(name, None)
        proxy = urllib.request.ProxyHandler({"http": os.environ.get("HTTP_PROXY", "")})
        opener = urllib.request.build_opener(proxy)
        seen = {}
        for url in json.loads(prompt):
            try:
                with opener.open(url, timeout=10) as response:
                    seen[url] = response.read().decode()
            except Exception as exc:  # any failure is the answer here
                seen[url] = f"{type(exc).__name__}: {exc}"
        result(session, json.dumps(seen))
    elif name == "crash":
        print("fatal: the fake crashed", file=sys.stderr)
        sys.exit(3)
    elif name == "steer":
        say(session, "Waiting for a steer.")
        steer = read_user(session, timeout=20)
        say(session, f"Steered: {steer}")
        result(session, f"{opening}Done after the steer: {steer}", turns=2)
    else:
        emit(
            {
                "type": "rate_limit_event",
                "rate_limit_info": {
                    "status": "allowed_warning",
                    "resetsAt": int(time.time()) + 7200,
                    "rateLimitType": "seven_day",
                    "utilization": 0.8,
                },
                "uuid": str(uuid.uuid4()),
                "session_id": session.id,
            }
        )
        say(session, "Looking at the folder.")
        tool(session, "Bash", {"command": "ls"}, "app.py")
        Path("fake-claude-output.txt").write_text(prompt)
        say(session, f"Done: {prompt}")
        result(session, f"{opening}Done: {prompt}")


def main(argv: list[str]) -> int:
    if "--version" in argv or "-v" in argv:
        print(VERSION)
        return 0
    for flag in ("-p", "--verbose", "--permission-prompt-tool"):
        if flag not in argv:
            print(f"fake claude: expected {flag}", file=sys.stderr)
            return 2
    resume = argv[argv.index("--resume") + 1] if "--resume" in argv else None
    session = Session(resume or str(uuid.uuid4()), resumed=resume is not None)
    if resume and not session.earlier:
        emit(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "num_turns": 0,
                "session_id": resume,
                "errors": [f"No conversation found with session ID: {resume}"],
                "total_cost_usd": 0,
                "usage": {},
                "duration_ms": 0,
                "duration_api_ms": 0,
                "stop_reason": None,
                "modelUsage": {},
                "permission_denials": [],
            }
        )
        return 1
    model = argv[argv.index("--model") + 1] if "--model" in argv else "claude-fable-5"
    emit(
        {
            "type": "system",
            "subtype": "init",
            "session_id": session.id,
            "cwd": os.getcwd(),
            "model": model,
            "tools": ["Bash", "Edit"],
            "mcp_servers": [],
            "permissionMode": "default",
            "apiKeySource": "none",
            "claude_code_version": "2.1.197",
            "slash_commands": [],
            "output_style": "default",
            "skills": [],
            "plugins": [],
            "uuid": str(uuid.uuid4()),
        }
    )
    name = scenario()
    prompt = read_user(session)
    while prompt is not None:
        turn(session, prompt, name)
        if name == "limit":
            return 1
        name = "success"  # a later message in the same run: an ordinary turn
        prompt = read_user(session)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
