"""How an executor's harness is started: inside the bubblewrap sandbox (docs/sandbox.md).

The task's folder and the account's config folder are writable (the harness writes its session
there); every other account's folder stays hidden, with the home, the vault and the person's
credentials. The network goes through Atlas's egress proxy on a channel of its own, where the
harness's provider hosts pass without a question (the channel's own allow-list); any other host
is asked of the person through the task's `ask` (atlas/executors/egress.py), as a command's are,
and the proxy logs what it did: "asked the person, refused", or "no one to ask". Where no
sandbox can start, or socat cannot bridge the proxy in, the start is refused (fail closed): a
harness with no network cannot work, and one outside the sandbox is the person's choice,
through `[sandbox] enabled = false`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import AtlasError
from atlas.executors.base import ExecutorError

if TYPE_CHECKING:
    from atlas.home import Bot, Home
    from atlas.sandbox.launcher import SandboxPolicy
    from atlas.sandbox.proxy import DomainAsker

log = logging.getLogger(__name__)

ALLOWED_NAMES = ("PATH", "HOME", "LANG", "TERM", "TZ", "USER")


@dataclass(frozen=True)
class Launch:
    """What to execute: the full argv (bwrap in front when sandboxed), its environment, where."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    sandboxed: bool


def _patterns(hosts: Sequence[str]) -> tuple[str, ...]:
    """The harness's hosts as the proxy's allow-list writes them (`*.x.com` -> `.x.com`)."""
    from atlas.sandbox.proxy_protocol import normalise_pattern

    try:
        return tuple(normalise_pattern(host) for host in hosts)
    except ValueError as exc:  # allowed_domains is checked when config.toml loads: a plugin's
        raise ExecutorError(f"the executor's hosts: {exc}") from exc


class ExecutorLauncher:
    """Starts harness processes for one home. `ask` is asked about hosts outside the harness's
    own (a DomainAsker: the person's yes or no); `hidden_config_dirs` are the config folders of
    every account, hidden from each run but its own account's."""

    def __init__(
        self,
        home: Home,
        *,
        ask: DomainAsker | None = None,
        hidden_config_dirs: Sequence[Path] = (),
    ) -> None:
        self.home = home
        self.ask = ask
        self.hidden_config_dirs = tuple(hidden_config_dirs)

    def environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        """PATH HOME LANG LC_* TERM TZ USER, [sandbox] env, then the harness's own (`extra`);
        no variable the config names as a secret."""
        from atlas.secrets import secret_env_names

        env = {
            name: value
            for name, value in os.environ.items()
            if name in ALLOWED_NAMES or name.startswith("LC_")
        }
        env |= self.home.settings.sandbox.env
        for name in secret_env_names(self.home) & env.keys():
            del env[name]
        return env | dict(extra)

    @contextlib.asynccontextmanager
    async def launch(
        self,
        argv: Sequence[str],
        *,
        folder: Path,
        account_paths: Sequence[Path],
        env: Mapping[str, str],
        hosts: Sequence[str],
        bot: str | None = None,
        ask: DomainAsker | None = None,
    ) -> AsyncIterator[Launch]:
        """The launch of `argv` in `folder`, valid while the block lasts (its proxy channel).
        `account_paths`: the account's config folder first, then any file the harness keeps
        for it elsewhere; all writable, and unhidden for this run alone. `bot`: whose view
        it runs in (its grants; None: the home's grants alone). `hosts` pass without a
        question; any other is asked through `ask` (else the launcher's; neither: refused)."""
        environment = self.environment(env)
        await asyncio.to_thread(_prepare, folder, account_paths[0])
        if not self.home.settings.sandbox.enabled:
            yield Launch(list(argv), environment, folder, sandboxed=False)
            return
        if shutil.which("socat") is None:
            raise ExecutorError(
                "executors run in the sandbox and reach their provider through Atlas's proxy, "
                "which needs socat: `sudo apt-get install socat` (or `[sandbox] enabled = false` "
                "in config.toml to run them unsandboxed)"
            )
        from atlas.sandbox.egress_watch import ChannelWatch
        from atlas.sandbox.proxy import proxy_for

        proxy = await proxy_for(self.home)
        own = ChannelWatch(also_allowed=_patterns(hosts))
        async with proxy.channel(ask or self.ask, own) as socket:
            try:
                argv_in, policy = await asyncio.to_thread(
                    self._sandboxed, argv, folder, account_paths, environment, socket, bot
                )
            except AtlasError as exc:  # SandboxUnavailable: fail closed, saying how to fix it
                raise ExecutorError(f"the executor cannot start in the sandbox: {exc}") from exc
            yield Launch(argv_in, dict(policy.env), Path("/"), sandboxed=True)

    def _sandboxed(
        self,
        argv: Sequence[str],
        folder: Path,
        account_paths: Sequence[Path],
        env: dict[str, str],
        socket: Path,
        bot: str | None = None,
    ) -> tuple[list[str], SandboxPolicy]:
        """bwrap's argv and the policy (off the event loop: the first probe starts bwrap): the
        view of the bot that delegated (atlas/sandbox/view.py, its grants and the home's), with
        the task's folder as its workspace and the account's own paths writable."""
        from atlas.sandbox.launcher import sandbox_argv

        policy = executor_policy(
            self.home, self.home.bots.get(bot) if bot else None, folder, account_paths,
            hidden_config_dirs=self.hidden_config_dirs, env=env, socket=socket,
            binary=shutil.which(argv[0], path=env.get("PATH")),
        )  # fmt: skip
        return sandbox_argv(list(argv), policy), policy


def executor_policy(
    home: Home,
    bot: Bot | None,
    folder: Path,
    account_paths: Sequence[Path],
    *,
    hidden_config_dirs: Sequence[Path] = (),
    env: Mapping[str, str],
    socket: Path | None,
    binary: str | None = None,
) -> SandboxPolicy:
    """An executor's sandbox: the same view as the bot's commands (the grants of config.toml
    and bot.toml included), the task's folder for its workspace, the account's config folder
    and files writable and unhidden, every other account's hidden, the home's limits."""
    from dataclasses import replace

    from atlas.sandbox.limits import limits_of
    from atlas.sandbox.view import build_view

    view = build_view(home, bot, workspace=folder)
    own = tuple(path.resolve() for path in account_paths)
    hidden = [
        path for path in [*view.command_hidden(), *hidden_config_dirs] if path.resolve() not in own
    ]
    readable = list(view.command_readable())
    if binary:  # a harness installed under /tmp stays visible behind the private /tmp
        readable += _install_folders(Path(binary))
    policy = view.policy(env=env, proxy_socket=socket)
    return replace(
        policy,
        writable=(*own, *view.writable),
        hidden=tuple(hidden),
        readable=tuple(dict.fromkeys(readable)),
        cwd=folder,
        limits=limits_of(home.settings.sandbox),
    )


def _install_folders(binary: Path) -> list[Path]:
    """Where the harness's program lives: its folder, or the whole `node_modules` it is in
    (npm's launcher links to a script that starts a binary from another package)."""
    folders = []
    for path in (binary, Path(os.path.realpath(binary))):
        parts = path.parts
        if "node_modules" in parts:
            folders.append(Path(*parts[: parts.index("node_modules") + 1]))
        else:
            folders.append(path.parent)
    return list(dict.fromkeys(folders))


def _prepare(folder: Path, config_dir: Path) -> None:
    if not folder.is_dir():
        raise ExecutorError(f"the task's folder {folder} does not exist (or is not a folder)")
    config_dir.mkdir(parents=True, exist_ok=True)
