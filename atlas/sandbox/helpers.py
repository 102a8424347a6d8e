"""Programs Atlas itself runs over a bot's files (git, ripgrep): where they run and with what.

A bot writes the files these programs read, so it chooses their configuration: a `.git/config`
in its workspace can name an fsmonitor, hooks, filters or a diff program that git would run
(docs/sandbox.md, Helpers Atlas runs for a bot). So:

- git runs inside the bot's sandbox, read-only, with no network, and with every program-naming
  setting turned off on its command line (`SAFE_GIT`), with no system or global config;
- where no sandbox serves (`[sandbox] enabled = false`, or bwrap cannot start here), git runs on
  the host with the same settings, and each filter, diff and merge driver the repository's
  config names is switched off too (`_driver_overrides`);
- ripgrep runs on the host (it must see what the file tools see, and find_files checks every
  result against the fence) with `--no-config` and the same scrubbed environment: it runs no
  program unless told to (`--pre`, `--search-zip`, `--hostname-bin`), and Atlas never tells it.

Every helper gets `helper_env()`: no secret of the daemon's environment, no variable that
names a program or a config file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.sandbox.launcher import SandboxPolicy, SandboxUnavailable, probe, probed, sandbox_argv

if TYPE_CHECKING:
    from atlas.home import Bot, Home

log = logging.getLogger(__name__)

# git's settings that name a program to run, or make git reach further than the folder:
# given on the command line they win over every config file, the repository's own included.
SAFE_GIT_CONFIG = {
    "core.fsmonitor": "false",
    "core.hooksPath": "/dev/null",  # hooks looked up as /dev/null/<name>: none exists
    "core.untrackedCache": "false",
    "core.pager": "cat",
    "core.editor": "false",
    "sequence.editor": "false",
    "core.sshCommand": "false",
    "core.gitProxy": "",
    "core.askPass": "",
    "credential.helper": "",
    "diff.external": "",
    "gpg.program": "false",
    "log.showSignature": "false",
    "gc.auto": "0",
    "maintenance.auto": "false",
    "submodule.recurse": "false",
    "status.submoduleSummary": "false",
    "protocol.allow": "never",  # no transport at all (a partial clone would fetch blobs)
}
SAFE_GIT = [
    "--no-pager",
    "--no-optional-locks",
    *(arg for key, value in SAFE_GIT_CONFIG.items() for arg in ("-c", f"{key}={value}")),
]
# Driver settings under a name the repository chooses (`filter.<name>.clean`): turned off one
# by one on the host, where no sandbox contains them.
DRIVER_KEYS = re.compile(
    r"(?i)(filter\.(.+)\.(clean|smudge|process|required))|(diff\.(.+)\.(command|textconv))"
    r"|(merge\.(.+)\.driver)"
)
HELPER_SECONDS = 20.0
# From the daemon's environment, only what finding programs and reading names needs.
KEPT_NAMES = ("PATH", "HOME", "TZ")
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",  # no ~/.gitconfig, no ~/.config/git/config
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "LC_ALL": "C",
}


def helper_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH, HOME and TZ of the daemon, then git's safe settings: no secret, no
    RIPGREP_CONFIG_PATH, GIT_DIR, GIT_CONFIG_*, LD_PRELOAD or anything else that names a
    program or a config to a helper."""
    source = os.environ if environ is None else environ
    return {name: source[name] for name in KEPT_NAMES if name in source} | GIT_ENV


@dataclass(frozen=True)
class HelperLaunch:
    """What to execute for one helper: argv and environment; `sandboxed` says where."""

    argv: list[str]
    env: dict[str, str]
    sandboxed: bool


def _standalone_policy(home: Home, folder: Path) -> SandboxPolicy:
    """The view of a helper run for no bot (an executor's folder): the standard hidden paths,
    the folder itself visible."""
    from atlas.sandbox.policy import person_readable, standard_hidden

    return SandboxPolicy(
        workspace=folder, hidden=tuple(standard_hidden(home)), readable=person_readable()
    )


def _sandbox_policy(home: Home, bot: Bot | None, folder: Path) -> SandboxPolicy:
    from atlas.sandbox.policy import policy_for

    policy = policy_for(home, bot) if bot is not None else _standalone_policy(home, folder)
    # Read-only: a helper only reads. No proxy socket: no network at all.
    env = helper_env(policy.env)
    return replace(policy, read_only=True, proxy_socket=None, env=env, cwd=Path("/"))


def _sandboxed_argv(home: Home, bot: Bot | None, argv: list[str], folder: Path) -> HelperLaunch:
    policy = _sandbox_policy(home, bot, folder)
    return HelperLaunch(sandbox_argv(argv, policy), dict(policy.env), True)


_warned_unavailable = False


def _warn_unavailable(reason: str) -> None:
    global _warned_unavailable
    if not _warned_unavailable:
        log.warning("sandbox: helpers run on the host, hooks off: %s", reason)
        _warned_unavailable = True


async def helper_launch(home: Home, bot: Bot | None, argv: list[str], folder: Path) -> HelperLaunch:
    """`argv` inside the sandbox of `bot` (or of no bot: the standard hidden paths, `folder`
    visible), read-only and offline; on the host, with `helper_env()`, where no sandbox serves.
    The program runs in `/`: give it the folder by argument (`git -C`)."""
    if home.settings.sandbox.enabled:
        try:
            if not probed():  # the first probe starts bwrap a few times: not on the loop
                await asyncio.to_thread(probe)
            return await asyncio.to_thread(_sandboxed_argv, home, bot, argv, folder)
        except SandboxUnavailable as exc:
            _warn_unavailable(str(exc))
    return HelperLaunch(argv, helper_env(), False)


@dataclass(frozen=True)
class HelperResult:
    returncode: int  # -1: it did not end in time
    stdout: bytes
    stderr: bytes


async def run_helper(
    launch: HelperLaunch, *, timeout: float = HELPER_SECONDS, stdout: bool = True
) -> HelperResult:
    """Runs a launch to its end (killed at `timeout`), stdin closed."""
    pipe = asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(
        *launch.argv,
        cwd="/",
        env=launch.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=pipe if stdout else asyncio.subprocess.DEVNULL,
        stderr=pipe,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return HelperResult(-1, b"", b"")
    return HelperResult(process.returncode or 0, out or b"", err or b"")


def git_binary() -> str | None:
    return shutil.which("git")


async def _driver_overrides(git: str, folder: Path) -> list[str]:
    """`-c` options turning off each filter, diff and merge driver the repository's config
    names (for git on the host: there a driver would run as the daemon)."""
    argv = [git, *SAFE_GIT, "-C", str(folder), "config", "--null", "--name-only"]
    argv += ["--get-regexp", r"^(filter|diff|merge)\."]
    done = await run_helper(HelperLaunch(argv, helper_env(), False), timeout=HELPER_SECONDS)
    overrides = []
    for key in done.stdout.decode("utf-8", errors="replace").split("\0"):
        if match := DRIVER_KEYS.fullmatch(key.strip()):
            value = "false" if key.lower().endswith(".required") else ""
            overrides += ["-c", f"{match.group(0)}={value}"]
    return overrides


async def run_git(
    home: Home,
    bot: Bot | None,
    folder: Path,
    args: list[str],
    *,
    timeout: float = HELPER_SECONDS,
    stdout: bool = True,
    reads_contents: bool = True,
) -> HelperResult:
    """`git -C folder ARGS` with every hook off, in the sandbox of `bot` where one serves
    (returncode 127 when git is not installed). `reads_contents=False` (ls-files)
    says git reads no file's content, so no filter or diff driver could run: on the host, the
    repository's drivers need not be looked up."""
    git = git_binary()
    if git is None:
        return HelperResult(127, b"", b"git is not installed")
    argv = [git, *SAFE_GIT, "-C", str(folder), *args]
    launch = await helper_launch(home, bot, argv, folder)
    if not launch.sandboxed and reads_contents:
        overrides = await _driver_overrides(git, folder)
        argv = [git, *SAFE_GIT, *overrides, "-C", str(folder), *args]
        launch = replace(launch, argv=argv)
    return await run_helper(launch, timeout=timeout, stdout=stdout)


__all__ = [
    "SAFE_GIT",
    "HelperLaunch",
    "HelperResult",
    "helper_env",
    "helper_launch",
    "run_git",
    "run_helper",
]
