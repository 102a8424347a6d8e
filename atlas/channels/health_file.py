"""The daemon's channel health in `<home>/run/channels.json` (a node's in
`<home>/run/nodes/<name>/`, atlas/run_files.py), for `atlas doctor` to read.

`atlas doctor` is another process, so the daemon writes each channel's health there whenever it
changes, with its host and pid: a record whose pid is gone on this host belongs to a daemon that
is not running. The file is replaced atomically (written beside, then renamed); one that cannot be read (torn,
edited, from another version) counts as unknown, never as an error of doctor's own.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from atlas.channels.supervisor import ChannelHealth, Health, utc_now
from atlas.run_files import THIS_HOST, run_dir, run_dirs, writer_alive

log = logging.getLogger(__name__)

FORMAT = 1


def health_path(home_root: Path, node: str | None = None) -> Path:
    return run_dir(home_root, node) / "channels.json"


@dataclass
class HealthRecord:
    """What the file says: the daemon's pid, when it was written, and each channel's health."""

    pid: int
    updated: datetime
    running: bool  # False once the daemon stopped cleanly
    channels: dict[str, Health] = field(default_factory=dict)
    host: str = THIS_HOST  # where the daemon ran (files of older versions: here)


class HealthWriter:
    """Keeps the run file up to date with the daemon's channels. `healths` is read at each
    write: a node's channels come and go with its leases (`refresh` after a change)."""

    def __init__(self, path: Path, healths: Callable[[], Mapping[str, ChannelHealth]]) -> None:
        self.path = path
        self.healths = healths
        self.running = True
        self._heard: set[int] = set()  # the healths listened to already, by identity
        self.refresh()

    def refresh(self) -> None:
        """Listen to channels started since, and write the file."""
        for health in self.healths().values():
            if id(health) not in self._heard:
                self._heard.add(id(health))
                health.listen(lambda _name, _health: self.write())
        self.write()

    def write(self) -> None:
        record = {
            "format": FORMAT,
            "pid": os.getpid(),
            "host": THIS_HOST,
            "updated": utc_now().isoformat(),
            "running": self.running,
            "channels": {name: h.current.as_json() for name, h in self.healths().items()},
        }
        # A few hundred bytes, only when a channel changes state: cheap enough on the loop.
        partial = self.path.with_name(self.path.name + ".partial")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as exc:
            log.warning("could not record channel health in %s: %s", self.path, exc)

    def close(self) -> None:
        """The daemon stopped: say so, with the channels' last health."""
        self.running = False
        self.write()


def read_health(path: Path) -> HealthRecord | None:
    """The record in `path`; None when there is none or it cannot be read whole."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        channels = {name: Health.from_json(h) for name, h in data["channels"].items()}
        return HealthRecord(
            int(data["pid"]),
            datetime.fromisoformat(data["updated"]),
            bool(data["running"]),
            channels,
            str(data.get("host") or THIS_HOST),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.info("channel health in %s is unreadable: %s", path, exc)
        return None


def daemon_alive(record: HealthRecord) -> bool:
    """Running, as far as this machine can tell (a daemon on another host: as it last said)."""
    return record.running and writer_alive(record.pid, record.host) is not False


# (name, ok, detail, fix): atlas doctor's Check, without importing doctor here.
DoctorLine = tuple[str, bool, str, str]
RECONNECTING_FIX = "Atlas keeps retrying; the daemon's log has each failure with its traceback"
STOPPED_FIX = "fix what the reason says, then restart `atlas run`"


def channel_health_checks(home_root: Path) -> list[DoctorLine]:
    """What `atlas doctor` says of the daemon's channels: each one's health while the daemon
    runs, else that it is not running; for a home served by nodes, each node's, named. Only a
    channel in trouble is a failure."""
    found = [(node, folder / "channels.json") for node, folder in run_dirs(home_root)]
    present = [(node, path) for node, path in found if path.exists()]
    if not present:
        return [("channels", True, "daemon not running (it has not run with this home)", "")]
    lines: list[DoctorLine] = []
    for node, path in present:
        lines.extend(_daemon_lines(node, path))
    return lines


def _daemon_lines(node: str | None, path: Path) -> list[DoctorLine]:
    who = f"node {node}: " if node else ""
    what = f"node {node}" if node else "daemon"
    record = read_health(path)
    if record is None:
        return [(f"{who}channels", True, f"health unknown: {path} could not be read", "")]
    when = record.updated.strftime("%Y-%m-%d %H:%M:%S UTC")
    if not record.running:
        return [(f"{who}channels", True, f"{what} not running (it stopped at {when})", "")]
    alive = writer_alive(record.pid, record.host)
    if alive is False:
        gone = f"{what} not running (pid {record.pid} is gone; last heard of at {when})"
        return [(f"{who}channels", True, gone, "")]
    where = f"pid {record.pid}" if alive else f"pid {record.pid} on host {record.host}"
    if not record.channels:
        return [(f"{who}channels", True, f"{what} running ({where}), no chat channels", "")]
    lines: list[DoctorLine] = []
    for name, health in sorted(record.channels.items()):
        fix = {"reconnecting": RECONNECTING_FIX, "stopped": STOPPED_FIX}.get(health.state, "")
        detail = health.describe() if alive else f"{health.describe()} (as of {when}, {where})"
        lines.append((f"{who}channel {name}", not fix, detail, fix))
    return lines


__all__ = [
    "DoctorLine",
    "HealthRecord",
    "HealthWriter",
    "channel_health_checks",
    "daemon_alive",
    "health_path",
    "read_health",
]
