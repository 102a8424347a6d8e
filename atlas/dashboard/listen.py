"""Where the dashboard listens, checked before the daemon starts anything. Kept apart from the
server (aiohttp.web, the pages, jinja2) so `atlas run` reads it without importing those: they
load after the bots' processes have started (docs/benchmarks.md, start-up)."""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.dashboard.auth import read_secret
from atlas.errors import ConfigError

if TYPE_CHECKING:
    from atlas.config import DashboardSettings
    from atlas.home import Home

log = logging.getLogger("atlas.dashboard.server")


def loopback_host(host: str) -> bool:
    """Whether a Host header (or a listen host) names this machine only."""
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8765
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:  # 127.0.0.1:8765, localhost:8765
        name = name.partition(":")[0]
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Listen:
    host: str
    port: int
    remote: bool  # reachable from other machines

    @property
    def url(self) -> str:
        """Where a browser on this machine finds it."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = "[::1]" if host == "::" else host
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"http://{shown}:{self.port}"


def listen_of(settings: DashboardSettings, config_path: Path | str = "config.toml") -> Listen:
    """`[dashboard] listen`, refused beyond loopback unless `allow_remote` says so."""
    host, _, port = settings.listen.rpartition(":")
    host = host.strip("[]")
    remote = not loopback_host(f"[{host}]" if ":" in host else host)
    if remote and not settings.allow_remote:
        raise ConfigError(
            f"{config_path}: dashboard.listen = {settings.listen!r} is reachable from other "
            "machines; set [dashboard] allow_remote = true to allow it (and put it behind "
            "TLS), or listen on 127.0.0.1"
        )
    return Listen(host, int(port), remote)


def dashboard_listen(home: Home) -> Listen | None:
    """Where `atlas run` serves the dashboard; None when it is off. Raises ConfigError for an
    address beyond loopback without allow_remote: the daemon stops before starting anything."""
    settings = home.settings.dashboard
    if not settings.enabled:
        return None
    listen = listen_of(settings, home.config_path)
    try:
        read_secret(home.root)  # made if missing; one others may read is refused now, not later
    except OSError as exc:  # a home Atlas cannot write: the daemon runs, without the dashboard
        log.error("dashboard: off, its secret cannot be made or read: %s", exc)
        return None
    return listen
