"""How run_command starts a command: inside the bot's sandbox (with its own proxy channel), or,
when the person said so, outside it. Also the hint added when the sandbox stopped something."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import ToolError
from atlas.sandbox import limits
from atlas.sandbox.launcher import SandboxPolicy, probe, probed, sandbox_argv
from atlas.sandbox.offline import could_use_network
from atlas.sandbox.policy import policy_for, sandbox_enabled
from atlas.secrets import command_env
from atlas.tools.registry import RunContext, effective_mode

if TYPE_CHECKING:
    from atlas.sandbox.proxy import DomainAsker

log = logging.getLogger(__name__)

# No command may wait for a pager, a terminal or a password prompt: nobody is there to answer.
QUIET_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "NO_COLOR": "1",
    "CLICOLOR": "0",
    "TERM": "dumb",
    "GIT_TERMINAL_PROMPT": "0",
}

DOMAINS_KEY = "sandbox_domains"  # run.state.tool_state: domains the person let commands reach
ALLOW, DENY = "Allow for this conversation", "Deny"
# What a command prints when the sandbox, not the command, is why it failed.
BLOCKED = re.compile(
    r"Read-only file system|Network is unreachable|Could not resolve host|"
    r"Temporary failure in name resolution|Name or service not known|blocked by Atlas|"
    r"bwrap: Can't chdir|Failed to connect to (?!127\.0\.0\.1|localhost|\[?::1)"
)
HINT = (
    "\n[the sandbox stopped this (it lets commands write only in the workspace and reach the "
    "network only through Atlas's proxy); if the command really needs more, run it again with "
    "sandbox=false: the person is asked every time]"
)
READ_ONLY_HINT = (
    "\n[this conversation is in read-only mode: commands can write nowhere, not even in the "
    "workspace (only a private /tmp)]"
)


@dataclass(frozen=True)
class Launch:
    """What to execute for one command: argv, environment, and where."""

    command: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    sandboxed: bool
    hidden: tuple[str, ...] = ()  # what the sandbox hides: a command failing on one was stopped
    read_only: bool = False


def domain_asker(run: RunContext) -> DomainAsker:
    """Asks the person whether commands may reach a domain; a yes holds for the conversation.
    Nobody to ask, or no answer in [trust] ask_timeout: no."""
    allowed: set[str] = run.state.tool_state.setdefault(DOMAINS_KEY, set())

    async def ask(host: str) -> bool:
        if host in allowed:
            return True
        if run.ask is None:
            return False
        question = (
            f"A command of {run.bot.name} wants to reach {host}, which is not on the sandbox's "
            "allowed domains. Let commands in this conversation reach it?"
        )
        try:
            answer = await asyncio.wait_for(
                run.ask(question, [ALLOW, DENY]), run.settings.trust.ask_timeout
            )
        except TimeoutError:
            return False
        if answer != ALLOW:
            return False
        allowed.add(host)
        return True

    return ask


@contextlib.asynccontextmanager
async def _proxy_channel(run: RunContext, command: str) -> AsyncIterator[Path | None]:
    """A proxy socket for one command, or None (no network) when socat cannot bridge it or
    the command could not use one (atlas/sandbox/offline.py: no bridge to start)."""
    if not could_use_network(command):
        yield None
        return
    if shutil.which("socat") is None:
        log.warning("sandbox: socat is not installed; commands get no network at all")
        yield None
        return
    from atlas.sandbox.proxy import proxy_for

    proxy = await proxy_for(run.home)
    async with proxy.channel(domain_asker(run)) as socket:
        yield socket


def sandbox_policy(run: RunContext, workdir: Path, proxy_socket: Path | None) -> SandboxPolicy:
    read_only = effective_mode(run) == "read-only"
    policy = policy_for(run.home, run.bot, read_only=read_only, proxy_socket=proxy_socket)
    return replace(policy, cwd=workdir, env={**policy.env, **QUIET_ENV})


@contextlib.asynccontextmanager
async def launch(
    run: RunContext, command: str, workdir: Path, *, sandbox: bool = True
) -> AsyncIterator[Launch]:
    """The launch of `command`, valid while the context lasts (its proxy channel with it)."""
    argv = ["bash", "-c", command]
    if not sandbox_enabled(run.home) or not sandbox:  # not shielded from the OOM killer
        argv = [*limits.unsandboxed_prefix(), *argv]
    if not sandbox_enabled(run.home):
        yield Launch(command, argv, {**command_env(run.home), **QUIET_ENV}, workdir, False)
        return
    if not sandbox:
        if run.ask is None:  # the gate asks the person for this; without one it cannot happen
            raise ToolError(
                "running outside the sandbox needs the person's yes; nobody can be asked here"
            )
        yield Launch(command, argv, {**command_env(run.home), **QUIET_ENV}, workdir, False)
        return
    await _probe_off_loop()
    run.bot.workspace.mkdir(parents=True, exist_ok=True)  # bound into the sandbox: must exist
    async with _proxy_channel(run, command) as socket:
        policy = sandbox_policy(run, workdir, socket)
        hidden = tuple(str(path) for path in policy.hidden)
        group = limits.create_group(policy.limits)
        try:
            argv = sandbox_argv(argv, policy, lifeline=True, group=group)
            yield Launch(command, argv, dict(policy.env), Path("/"), True, hidden, policy.read_only)
        finally:
            limits.release(group)  # whatever is still in it is killed


async def _probe_off_loop() -> None:
    """The first probe starts bwrap a few times: not on the event loop."""
    if not probed():
        await asyncio.to_thread(probe)


def with_hint(output: str, launch: Launch) -> str:
    """The output, and a hint when it shows the sandbox stopping the command."""
    if not launch.sandboxed:
        return output
    if launch.read_only and "Read-only file system" in output:
        return output + READ_ONLY_HINT
    if BLOCKED.search(output) or _hidden_missing(output, launch.hidden):
        return output + HINT
    return output


def _hidden_missing(output: str, hidden: tuple[str, ...]) -> bool:
    """A line saying a hidden path (or one inside it) does not exist: the whole path, not a
    piece of another (`/run` is hidden; `/work/run.sh` missing is the command's own doing)."""
    if not hidden:
        return False
    names = "|".join(re.escape(path) for path in hidden)
    pattern = re.compile(rf"(?<![\w.~-])(?:{names})(?![\w.~-])")
    for line in output.splitlines():
        if "No such file or directory" in line and pattern.search(line):
            return True
    return False
