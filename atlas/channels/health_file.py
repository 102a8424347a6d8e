"""The daemon's channel health in `<home>/run/channels.json`, for `atlas doctor` to read.

`atlas doctor` is another process, so the daemon writes each channel's health there whenever it
changes, with its pid: a record whose pid is gone belongs to a daemon that is not running. The
file is replaced atomically (written beside, then renamed); one that cannot be read (torn,
edited, from another version) counts as unknown, never as an error of doctor's own.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from atlas.channels.supervisor import ChannelHealth, Health, utc_now

log = logging.getLogger(__name__)

FORMAT = 1


def health_path(home_root: Path) -> Path:
    return home_root / "run" / "channels.json"


@dataclass
class HealthRecord:
    """What the file says: the daemon's pid, when it was written, and each channel's health."""

    pid: int
    updated: datetime
    running: bool  # False once the daemon stopped cleanly
    channels: dict[str, Health] = field(default_factory=dict)


class HealthWriter:
    """Keeps the run file up to date with the daemon's channels."""

    def __init__(self, path: Path, healths: dict[str, ChannelHealth]) -> None:
        self.path = path
        self.healths = healths
        self.running = True
        for health in healths.values():
            health.listen(lambda _name, _health: self.write())
        self.write()

    def write(self) -> None:
        record = {
            "format": FORMAT,
            "pid": os.getpid(),
            "updated": utc_now().isoformat(),
            "running": self.running,
            "channels": {name: h.current.as_json() for name, h in self.healths.items()},
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
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.info("channel health in %s is unreadable: %s", path, exc)
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (it may, rarely, be another program by now)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


def daemon_alive(record: HealthRecord) -> bool:
    return record.running and pid_alive(record.pid)


# (name, ok, detail, fix): atlas doctor's Check, without importing doctor here.
DoctorLine = tuple[str, bool, str, str]
RECONNECTING_FIX = "Atlas keeps retrying; the daemon's log has each failure with its traceback"
STOPPED_FIX = "fix what the reason says, then restart `atlas run`"


def channel_health_checks(home_root: Path) -> list[DoctorLine]:
    """What `atlas doctor` says of the daemon's channels: each one's health while the daemon
    runs, else that it is not running. Only a channel in trouble is a failure."""
    path = health_path(home_root)
    if not path.exists():
        return [("channels", True, "daemon not running (it has not run with this home)", "")]
    record = read_health(path)
    if record is None:
        return [("channels", True, f"health unknown: {path} could not be read", "")]
    when = record.updated.strftime("%Y-%m-%d %H:%M:%S UTC")
    if not record.running:
        return [("channels", True, f"daemon not running (it stopped at {when})", "")]
    if not pid_alive(record.pid):
        gone = f"daemon not running (pid {record.pid} is gone; last heard of at {when})"
        return [("channels", True, gone, "")]
    if not record.channels:
        return [("channels", True, f"daemon running (pid {record.pid}), no chat channels", "")]
    lines: list[DoctorLine] = []
    for name, health in sorted(record.channels.items()):
        fix = {"reconnecting": RECONNECTING_FIX, "stopped": STOPPED_FIX}.get(health.state, "")
        lines.append((f"channel {name}", not fix, health.describe(), fix))
    return lines


__all__ = [
    "DoctorLine",
    "HealthRecord",
    "HealthWriter",
    "channel_health_checks",
    "daemon_alive",
    "health_path",
    "pid_alive",
    "read_health",
]
