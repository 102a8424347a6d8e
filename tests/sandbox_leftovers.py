"""Processes of a sandbox still alive: bwrap, the proxy bridge (socat, and the `cat` draining it)
or a command's children, found by a path their command line names (a test's temporary
folder). Used by the lifetime tests and by the suite's end-of-run check (tests/conftest.py)."""

from __future__ import annotations

import time
from pathlib import Path

SANDBOX_PROGRAMS = (b"bwrap", b"socat", b"atlas-sandbox")


def _alive(entry: Path) -> bytes | None:
    try:
        cmdline = (entry / "cmdline").read_bytes()
        state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None  # exited while we looked
    return None if state == "Z" else cmdline  # a zombie is dead; its parent reaps it


def sandbox_processes(naming: str) -> list[str]:
    """bwrap/socat processes whose command line names `naming`, and the processes inside
    their sandboxes (a bwrap's descendants)."""
    found: dict[int, str] = {}
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmdline = _alive(entry)
        if cmdline is None:
            continue
        pid = int(entry.name)
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(pid)
        words = cmdline.split(b"\0")
        program = Path(words[0].decode(errors="replace")).name.encode()
        if naming.encode() in cmdline and (
            program in SANDBOX_PROGRAMS or any(w in SANDBOX_PROGRAMS for w in words)
        ):
            found[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
    for pid in list(found):
        todo = list(children.get(pid, []))
        while todo:
            child = todo.pop()
            found.setdefault(child, f"(inside the sandbox of {pid})")
            todo += children.get(child, [])
    return [f"{pid}: {line}" for pid, line in sorted(found.items())]


def wait_until_gone(naming: str, seconds: float = 10.0) -> list[str]:
    """What is still there after `seconds` (a killed process takes a moment to exit)."""
    deadline = time.monotonic() + seconds
    while (left := sandbox_processes(naming)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
