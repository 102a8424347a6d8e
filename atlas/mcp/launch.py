"""How a stdio MCP server is started: inside the bubblewrap sandbox unless the person opted out.

A sandboxed server sees the root filesystem read-only and the Atlas home as an empty folder,
except its own data folder `<home>/mcp-data/<server>/`, which is writable and is its HOME (npm,
uv and pip caches, the server's own files; it lasts across restarts). Its environment is the
sandbox's allow-list plus the server's own `env` from mcp.json (the person's explicit grant).
It has no network of its own: it reaches the outside only through the egress proxy, and only the
allowed domains of `[sandbox] allowed_domains` and of its own `allowed_domains` in mcp.json (there
is no person to ask for a server). A server started by a known launcher (`npx`, `uvx`, `pipx run`:
atlas/mcp/launchers.py) may also reach that launcher's registry until it has answered the MCP
handshake, that is while the launcher installs it; its caches live in its data folder, so the
next start needs no network.

Before it starts, a missing program (say `npx` not installed) or a program or script the sandbox
does not show (under the private `/tmp`, inside the hidden home) stops it with a message saying so.

Opt-outs, both the person's: `"sandbox": false` on the server's entry in mcp.json, or
`[sandbox] enabled = false` in config.toml. Where the sandbox cannot start, the server does not
start either (fail closed); its status says why and how to fix it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from atlas.config import BotSandboxSettings
from atlas.errors import ConfigError
from atlas.mcp.launchers import check_program, launcher_of, unseen_path

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters

    from atlas.home import Bot, Home
    from atlas.mcp.config import StdioServer
    from atlas.sandbox.egress_watch import ChannelWatch
    from atlas.sandbox.launcher import SandboxPolicy

log = logging.getLogger(__name__)

DATA_FOLDER = "mcp-data"


def server_data_dir(home: Home, name: str) -> Path:
    """A server's own writable folder (and HOME) when it runs sandboxed."""
    return home.root / DATA_FOLDER / name


def runs_sandboxed(home: Home, server: StdioServer) -> bool:
    from atlas.sandbox.policy import sandbox_enabled

    return server.sandbox and sandbox_enabled(home)


@contextlib.asynccontextmanager
async def stdio_parameters(
    home: Home, server: StdioServer, watch: ChannelWatch | None = None
) -> AsyncIterator[StdioServerParameters]:
    """The SDK's parameters to start `server` (already expanded), for as long as it runs: a
    sandboxed server's egress channel stays open until the block ends; `watch` gets the hosts
    it may reach besides the home's and records what the proxy refused. Raises ConfigError (not
    retried) when the sandbox cannot start it."""
    from mcp.client.stdio import StdioServerParameters

    where = f"{server.source}: server {server.name!r}"
    if not runs_sandboxed(home, server):
        path = server.env.get("PATH", os.environ.get("PATH"))
        check_program(where, server.command, server.args, path)
        yield StdioServerParameters(
            command=server.command, args=server.args, env=server.env or None, cwd=server.cwd
        )
        return
    data = server_data_dir(home, server.name)
    data.mkdir(parents=True, exist_ok=True)
    cwd = _inside_cwd(home, server, data)
    await _probe_off_loop()
    launcher = launcher_of(server.command, server.args)
    if watch is not None:
        env = {**home.settings.sandbox.env, **server.env}
        registries = launcher.registry_hosts(env) if launcher else ()
        watch.also_allowed = (*registries, *server.allowed_domains)
    async with _egress(home, watch) as socket:
        argv = _sandboxed_argv(home, server, data, cwd, socket)
        # bwrap itself starts in the data folder; the server's environment is set inside.
        yield StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(data))


def _inside_cwd(home: Home, server: StdioServer, data: Path) -> Path:
    """The server's working folder inside the sandbox: its `cwd` when that is visible there,
    else its data folder."""
    if not server.cwd:
        return data
    cwd = Path(server.cwd).resolve()
    home_root = home.root.resolve()
    if cwd.is_relative_to(home_root) and not cwd.is_relative_to(data.resolve()):
        raise ConfigError(
            f"{server.source}: server {server.name!r}: cwd {cwd} is inside the Atlas home, which "
            f"a sandboxed server cannot see; use {data} (its own folder), a folder outside the "
            'home (read-only), or "sandbox": false on the server'
        )
    return cwd


@dataclass(frozen=True)
class _ServerAsBot:
    """What the sandbox's policy_for reads of a bot, for a server, which belongs to the home:
    its data folder as the workspace, and no grants of its own."""

    name: str
    workspace: Path
    settings: Any = field(default_factory=lambda: SimpleNamespace(sandbox=BotSandboxSettings()))


def _sandboxed_argv(
    home: Home, server: StdioServer, data: Path, cwd: Path, socket: Path | None
) -> list[str]:
    from atlas.sandbox.launcher import SandboxUnavailable, sandbox_argv
    from atlas.sandbox.policy import policy_for

    # The home's standard policy (the home and the credentials hidden, allow-listed env,
    # [sandbox] hidden and env of config.toml), with the server's folder as its workspace.
    policy = policy_for(home, cast("Bot", _ServerAsBot(server.name, data)), proxy_socket=socket)
    launcher = launcher_of(server.command, server.args)
    launcher_env = launcher.data_env(data) if launcher else {}
    env = {**policy.env, "HOME": str(data), **launcher_env, **server.env}
    policy = dataclasses.replace(policy, env=env, cwd=cwd)
    _check_visible(server, policy, data, env.get("PATH"))
    try:
        return sandbox_argv([server.command, *server.args], policy)
    except SandboxUnavailable as exc:
        # Retrying cannot help until the person acts: reported once, as a configuration fault.
        raise ConfigError(
            f"the sandbox cannot start, so MCP server {server.name!r} does not either: {exc} "
            f'(or give the server "sandbox": false in {server.source})'
        ) from None


def _check_visible(
    server: StdioServer, policy: SandboxPolicy, data: Path, path: str | None
) -> None:
    """Raise ProgramMissing when the server's program is missing, ConfigError when it or a script among its
    arguments is where the sandbox shows nothing (what node would call MODULE_NOT_FOUND)."""
    from atlas.sandbox.launcher import bound_back

    where = f"{server.source}: server {server.name!r}"
    check_program(where, server.command, server.args, path)
    program = shutil.which(server.command, path=path) if "/" not in server.command else None
    candidates = [Path(program or server.command), *(Path(a) for a in server.args)]
    visible = (data, *policy.writable, *bound_back(policy))  # grants, Atlas's programs
    for candidate in candidates:
        if not candidate.is_absolute() or not candidate.exists():
            continue
        why = unseen_path(candidate, policy.hidden, visible, visible)
        if why:
            raise ConfigError(
                f"{where}: {why}, so the server cannot start there. Move it to a folder the "
                f"sandbox shows (read-only: /opt, /usr/local, or a folder of [sandbox] readable; "
                f"writable: {data}), "
                f'or give the server "sandbox": false'
            )


async def _probe_off_loop() -> None:
    """The first probe starts bwrap a few times: not on the event loop. Its failure is
    reported by sandbox_argv."""
    from atlas.sandbox.launcher import SandboxUnavailable, probe

    with contextlib.suppress(SandboxUnavailable):
        await asyncio.to_thread(probe)


@contextlib.asynccontextmanager
async def _egress(home: Home, watch: ChannelWatch | None) -> AsyncIterator[Path | None]:
    """A channel of the home's egress proxy, asking no one: only allowed domains pass. None
    (no network at all) where socat, which bridges it into the sandbox, is missing."""
    from atlas.sandbox.proxy import proxy_for

    if shutil.which("socat") is None:
        log.warning("sandbox: socat is not installed; MCP servers get no network at all")
        yield None
        return

    proxy = await proxy_for(home)
    async with proxy.channel(None, watch) as socket:
        yield socket
