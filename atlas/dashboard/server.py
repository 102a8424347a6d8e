"""Serving the dashboard from the daemon: where it listens, the loopback rule, start and stop."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from atlas.dashboard.app import build_app
from atlas.dashboard.auth import Signer
from atlas.dashboard.context import Dashboard
from atlas.dashboard.listen import Listen, listen_of
from atlas.dashboard.port import taken_by
from atlas.errors import AtlasError, ConfigError
from atlas.run_files import THIS_HOST, run_dir, run_dirs, writer_alive

if TYPE_CHECKING:
    from atlas.channels.supervisor import ChannelHealth
    from atlas.dispatch import Dispatcher
    from atlas.home import Home
    from atlas.runtime import Runtime

log = logging.getLogger(__name__)


class DashboardServer:
    """The dashboard's aiohttp runner inside the daemon."""

    def __init__(self, dashboard: Dashboard, listen: Listen, node: str | None = None) -> None:
        self.dashboard = dashboard
        self.listen = listen
        self.node = node  # a node's address is recorded in its own run folder
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        runner = web.AppRunner(build_app(self.dashboard), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.listen.host or None, self.listen.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.listen = dataclasses.replace(self.listen, port=port)  # port 0: the one given
        try:
            await asyncio.to_thread(write_url, self.dashboard.home.root, self.listen.url, self.node)
        except OSError as exc:  # served all the same; `atlas dashboard` names listen's address
            log.warning("dashboard: could not record its address for `atlas dashboard`: %s", exc)
        where = f"{self.listen.url} (listening on {self.dashboard.home.settings.dashboard.listen})"
        if self.listen.remote:
            log.warning(
                "dashboard at %s: reachable from other machines ([dashboard] allow_remote = "
                "true); only a login link opens it",
                where,
            )
        else:
            log.info("dashboard at %s; `atlas dashboard` prints a login link", where)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        self.dashboard.events.close()  # open event streams end: nothing waits on a browser tab
        if self.dashboard.chat is not None:
            await self.dashboard.chat.stop()  # the Chat page's streams too
        if runner is not None:
            url_path(self.dashboard.home.root, self.node).unlink(missing_ok=True)
            await runner.cleanup()


def url_path(home_root: Path, node: str | None = None) -> Path:
    """Where the running daemon (or node) says its dashboard is, for `atlas dashboard`'s link."""
    return run_dir(home_root, node) / "dashboard.json"


def write_url(home_root: Path, url: str, node: str | None = None) -> None:
    path = url_path(home_root, node)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    record = {"url": url, "pid": os.getpid(), "host": THIS_HOST}
    partial.write_text(json.dumps(record) + "\n", encoding="utf-8")
    os.replace(partial, path)


def running_url(home_root: Path) -> str | None:
    """The URL of the dashboard a live daemon on this machine serves for this home: the plain
    daemon's, else the first node's (by name) running here; None when none does."""
    for _node, folder in run_dirs(home_root):
        try:
            data = json.loads((folder / "dashboard.json").read_text(encoding="utf-8"))
            url, pid, host = str(data["url"]), int(data["pid"]), str(data.get("host", THIS_HOST))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if writer_alive(pid, host):
            return url
    return None


async def start_dashboard(
    runtime: Runtime,
    listen: Listen,
    channel_health: Callable[[], Mapping[str, ChannelHealth]],
    dispatcher: Dispatcher | None = None,
    node: str | None = None,
) -> DashboardServer | None:
    """Serve the dashboard over the daemon's runtime. A port in use is logged, and the daemon
    goes on without the dashboard rather than not at all."""
    home = runtime.home
    signer = await asyncio.to_thread(Signer.for_home, home.root)  # the secret made if missing
    dashboard = Dashboard(
        home,
        runtime.store,
        runtime.audit,
        signer,
        channel_health=channel_health,
        conversation_states=runtime.conversation_states,
        reads=runtime.engines.reads,  # atlas.db's, or the home's PostgreSQL database's
        routines=runtime.engines.routines,
    )
    if dispatcher is not None:  # the questions its turns wait on: the Waiting page
        dashboard.attach(dispatcher)
    dashboard.watch_channels()
    server = DashboardServer(dashboard, listen, node)
    try:
        await server.start()
    except OSError as exc:
        taken = taken_by(listen)
        log.error(
            "dashboard: cannot listen on %s (%s); running without it: change [dashboard] "
            "listen in %s",
            home.settings.dashboard.listen,
            taken or exc,
            home.config_path,
        )
        return None
    return server


def doctor_lines(home: Home) -> list[tuple[str, bool, str, str, bool]]:
    """What `atlas doctor` says of the dashboard: (name, ok, detail, fix, optional)."""
    from atlas.dashboard.auth import read_secret, secret_path

    settings = home.settings.dashboard
    if not settings.enabled:
        return [("dashboard", True, "off ([dashboard] enabled = false)", "", False)]
    try:
        listen = listen_of(settings, home.config_path)
    except ConfigError as exc:
        fix = "set [dashboard] allow_remote = true, or listen on 127.0.0.1"
        return [("dashboard", False, str(exc), fix, False)]
    serving = running_url(home.root)
    state = f"served at {serving}" if serving else "not served now (the daemon is not running)"
    taken = None if serving else taken_by(listen)
    if taken is not None:  # the daemon would run without it: say so, not "all good"
        fix = f"stop that program, or change [dashboard] listen in {home.config_path}"
        return [("dashboard", False, f"{listen.url}: {taken}", fix, False)]
    lines = []
    if listen.remote:
        detail = (
            f"listen = {settings.listen!r} is reachable from other machines (allow_remote = "
            f"true); {state}"
        )
        lines.append(
            ("dashboard", False, detail, "put it behind TLS, or listen on 127.0.0.1", True)
        )
    else:
        lines.append(("dashboard", True, f"{listen.url}, loopback only; {state}", "", False))
    try:
        if secret_path(home.root).exists():
            read_secret(home.root)
    except AtlasError as exc:
        lines.append(
            ("dashboard secret", False, str(exc), f"chmod 600 {secret_path(home.root)}", False)
        )
    return lines
