"""Whether the dashboard's port is taken, and by what: `atlas dashboard` and `atlas doctor` say
so instead of linking to whatever listens there (another program would get the login token).

The owner is found as `ss -p` does, from /proc: the listening socket's inode in
/proc/net/tcp(6), then the process holding that inode among its open files. A process of
another user (or in another PID namespace) cannot be seen: then the port is only "taken".
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from atlas.dashboard.listen import Listen

log = logging.getLogger(__name__)

PROC = Path("/proc")
LISTENING = "0A"  # the TCP state in /proc/net/tcp


@dataclass(frozen=True)
class Owner:
    pid: int
    name: str  # /proc/<pid>/comm
    command: str  # its command line, shortened

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid}: {self.command})"


def port_taken(listen: Listen) -> bool:
    """Whether binding the dashboard's address fails because something listens there."""
    if listen.port == 0:  # any free port: never taken
        return False
    host = listen.host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind((host, listen.port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            log.debug("dashboard: cannot try %s:%s: %s", host, listen.port, exc)
    return False


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTENING and int(local.rpartition(":")[2], 16) == port:
                inodes.add(inode)
    return inodes


def port_owner(port: int) -> Owner | None:
    """The process listening on `port`, when this user can see it."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return None
    for process in PROC.iterdir():
        if not process.name.isdigit():
            continue
        try:
            held = any(os.readlink(fd) in wanted for fd in (process / "fd").iterdir())
            if not held:
                continue
            name = (process / "comm").read_text().strip()
            argv = (process / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        command = " ".join(part.decode(errors="replace") for part in argv if part)
        return Owner(int(process.name), name, command[:120])
    return None


def taken_by(listen: Listen) -> str | None:
    """None when the port is free; else what to tell the person ("taken by …")."""
    if not port_taken(listen):
        return None
    owner = port_owner(listen.port)
    who = str(owner) if owner else "another program (Atlas cannot see which)"
    return f"port {listen.port} on {listen.host or '0.0.0.0'} is taken by {who}"
