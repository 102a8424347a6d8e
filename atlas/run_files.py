"""Where a running `atlas run` leaves what other commands on the machine read: its channels'
health (`atlas doctor`) and its dashboard's address (`atlas dashboard`).

A plain daemon writes them in `<home>/run/`; a node (`atlas run --node NAME`) in
`<home>/run/nodes/<NAME>/`, so nodes sharing one home folder do not overwrite each other's. Each
file names the host and the pid that wrote it: on a folder shared between machines a pid only
says whether the writer lives when the host is this one.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

THIS_HOST = socket.gethostname()


def run_dir(home_root: Path, node: str | None = None) -> Path:
    base = home_root / "run"
    return base / "nodes" / node if node else base


def run_dirs(home_root: Path) -> list[tuple[str | None, Path]]:
    """The plain daemon's folder, then each node's that exists, by name."""
    nodes = run_dir(home_root) / "nodes"
    found = sorted(p for p in nodes.iterdir() if p.is_dir()) if nodes.is_dir() else []
    return [(None, run_dir(home_root)), *((p.name, p) for p in found)]


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists here (it may, rarely, be another program by now)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


def writer_alive(pid: int, host: str) -> bool | None:
    """Whether the process that wrote a run file lives; None when it ran on another host."""
    return pid_alive(pid) if host == THIS_HOST else None
