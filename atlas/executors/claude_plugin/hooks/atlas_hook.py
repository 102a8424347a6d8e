"""Atlas's Claude Code hook: one program for every hook event the plugin registers.

Claude Code runs it with the event's JSON on stdin (hooks/hooks.json). It hands the event to the
Atlas daemon over `<home>/run/executors.sock` (atlas/executors/bridge.py) and, for a
PermissionRequest, prints Claude Code's decision when the person answered through Atlas.
Without a plain daemon there, the first node's `<home>/run/nodes/NAME/executors.sock` (by name)
that accepts a connection: one of a node on another machine sharing the home folder, or one a
crash left, refuses at once and the next is tried.

Whatever goes wrong (no daemon, a timeout, a malformed answer), it prints nothing and exits 0:
Claude Code then asks at the desk as it would without the plugin. It never allows by itself.
Standard library only, and nothing slow at import: it runs on every session event and prompt.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from pathlib import Path

RUN, SOCKET, NODES = "run", "executors.sock", "nodes"  # <home>/run/[nodes/NAME/]executors.sock
HOME_FILE = "atlas-home"  # in the plugin's root, written by `atlas executors install-plugin`
MAX_INPUT = 1 << 20  # a larger event (a huge Write) is left to Claude Code's own prompt
REPORT_SECONDS = 1.0  # session reports: SessionEnd hooks share a 1.5 s budget
PERMISSION_SECONDS = 595.0  # the daemon answers first (approval_seconds); hooks.json says 600
# Atlas's own Claude Code runs (delegate) set this: their prompts are Atlas's to answer.
OWN_RUN = "ATLAS_OWN_RUN"
REPORTED = ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, paths: list[Path], timeout: float) -> None:
        super().__init__("atlas", timeout=timeout)
        self._paths = paths

    def connect(self) -> None:
        for path in self._paths:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(path))
            except OSError:
                sock.close()  # nobody serves it here: the next one
                continue
            self.sock = sock
            return
        raise ConnectionRefusedError("no Atlas daemon serves the plugin's socket")


def socket_paths(home: Path) -> list[Path]:
    """The plain daemon's socket, then each node's, by name (one folder read, no probing)."""
    run = home / RUN
    try:
        nodes = sorted(entry.name for entry in os.scandir(run / NODES) if entry.is_dir())
    except OSError:
        nodes = []
    return [run / SOCKET, *(run / NODES / name / SOCKET for name in nodes)]


def atlas_home() -> Path:
    """$ATLAS_HOME, else the home baked in at install, else ~/.atlas."""
    if os.environ.get("ATLAS_HOME"):
        return Path(os.environ["ATLAS_HOME"]).expanduser()
    baked = Path(__file__).resolve().parent.parent / HOME_FILE
    try:
        text = baked.read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    return Path(text).expanduser() if text else Path.home() / ".atlas"


def post(path: str, body: dict, timeout: float) -> dict | None:
    """POST JSON to the daemon; its JSON answer, or None when it cannot be had."""
    connection = _UnixConnection(socket_paths(atlas_home()), timeout)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read(MAX_INPUT)
        if response.status != 200:
            return None
        answer = json.loads(data)
        return answer if isinstance(answer, dict) else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def decision_output(answer: dict | None) -> dict | None:
    """Claude Code's PermissionRequest output for the daemon's answer; None: no decision."""
    if answer is None:
        return None
    behavior = answer.get("decision")
    if behavior == "allow":
        decision: dict = {"behavior": "allow"}
    elif behavior == "deny":
        message = answer.get("message")
        decision = {"behavior": "deny", "message": message if isinstance(message, str) else ""}
    else:
        return None
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


def main() -> int:
    if os.environ.get(OWN_RUN):
        return 0
    raw = sys.stdin.buffer.read(MAX_INPUT + 1)
    if len(raw) > MAX_INPUT:
        return 0
    try:
        event = json.loads(raw)
    except ValueError:
        return 0
    if not isinstance(event, dict):
        return 0
    name = event.get("hook_event_name")
    body = {"hook": event, "config_dir": os.environ.get("CLAUDE_CONFIG_DIR")}
    if name in REPORTED:
        post("/v1/session", body, REPORT_SECONDS)
    elif name == "PermissionRequest":
        output = decision_output(post("/v1/permission", body, PERMISSION_SECONDS))
        if output is not None:
            sys.stdout.write(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
