"""The handoff packet: what another executor needs to go on with a task it did not start.

When a task's account reaches its plan's limit and its route names another executor, that
executor cannot resume the session (a harness reads only its own logs), so it starts a session
of its own from this packet: the goal, what was done, the diff so far, the open questions and
the last messages (docs/executors.md, Delegating).

The diff is read with git in the task's folder. A folder the harness wrote to is not trusted:
its `.git/config` could name filters or a diff program that git would run, so git runs inside
the sandbox with nothing writable and no network (or, with the sandbox turned off, with the
external diff, text conversion and fsmonitor turned off).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atlas.home import Home

log = logging.getLogger(__name__)

DIFF_CHARS = 20_000  # of the diff in a packet; the stat is always whole
GIT_SECONDS = 20.0
LAST_MESSAGES = 6
DONE_ITEMS = 40
SAFE_GIT = [
    "git",
    "--no-pager",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "diff.external=",
    "--no-optional-locks",
]


@dataclass
class Handoff:
    goal: str
    folder: Path
    source: str  # the target name it leaves: `claude-code@work`
    reason: str  # why: the limit's message
    done: list[str] = field(default_factory=list)
    diff: str = ""
    questions: list[str] = field(default_factory=list)
    last_messages: list[str] = field(default_factory=list)

    def prompt(self) -> str:
        done = "\n".join(f"- {item}" for item in self.done[-DONE_ITEMS:]) or "(nothing recorded)"
        questions = "\n".join(f"- {q}" for q in self.questions) or "(none)"
        last = "\n\n".join(self.last_messages[-LAST_MESSAGES:]) or "(none)"
        return (
            f"[Handoff: another coding agent ({self.source}) worked on this task in this folder "
            f"({self.folder}) and had to stop: {self.reason}. Go on from where it stopped; do "
            "not start over. Check its changes below against the files before building on "
            "them.]\n\n"
            f"# Goal\n{self.goal}\n\n"
            f"# What was done\n{done}\n\n"
            f"# The diff so far\n{self.diff or '(no changes)'}\n\n"
            f"# Open questions\n{questions}\n\n"
            f"# The last messages\n{last}"
        )


async def folder_diff(home: Home, folder: Path, *, limit: int = DIFF_CHARS) -> str:
    """`git status --short`, `git diff HEAD --stat` and the diff (cut at `limit`), or why
    there is none (not a git repository, git failed)."""
    if (await _git(home, folder, ["rev-parse", "--is-inside-work-tree"])).strip() != "true":
        return "(the folder is not a git repository: no diff to show)"
    status = await _git(home, folder, ["status", "--short"])
    stat = await _git(home, folder, ["diff", "HEAD", "--stat", "--no-ext-diff", "--no-textconv"])
    diff = await _git(home, folder, ["diff", "HEAD", "--no-ext-diff", "--no-textconv"])
    if len(diff) > limit:
        diff = diff[:limit] + f"\n… (the diff goes on: {len(diff):,} characters in all)"
    parts = [f"git status --short:\n{status.strip() or '(clean)'}"]
    if stat.strip():
        parts.append(f"git diff HEAD --stat:\n{stat.rstrip()}")
    if diff.strip():
        parts.append(f"```diff\n{diff.rstrip()}\n```")
    return "\n\n".join(parts)


async def diff_stat(home: Home, folder: Path) -> str:
    """`git diff HEAD --stat` and the untracked files: what a turn changed, for the record."""
    if (await _git(home, folder, ["rev-parse", "--is-inside-work-tree"])).strip() != "true":
        return ""
    stat = await _git(home, folder, ["diff", "HEAD", "--stat", "--no-ext-diff", "--no-textconv"])
    untracked = await _git(home, folder, ["ls-files", "--others", "--exclude-standard"])
    new = "".join(f" {name} (new)\n" for name in untracked.splitlines() if name.strip())
    return (stat + new).rstrip()


async def _git(home: Home, folder: Path, args: list[str]) -> str:
    argv = [*SAFE_GIT, *args]
    try:
        if home.settings.sandbox.enabled:
            argv = await asyncio.to_thread(_sandboxed, home, folder, argv)
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=folder,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_git_env(),
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), GIT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
            return ""
    except Exception as exc:  # the packet goes without a diff rather than not at all
        log.warning("handoff: git %s in %s failed: %s", args[0], folder, exc)
        return ""
    if process.returncode != 0:
        log.debug("handoff: git %s in %s: %s", args[0], folder, err.decode(errors="replace"))
        return ""
    return out.decode("utf-8", errors="replace")


def _git_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TZ")}
    return env | {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _sandboxed(home: Home, folder: Path, argv: list[str]) -> list[str]:
    from atlas.sandbox.launcher import SandboxPolicy, sandbox_argv
    from atlas.sandbox.policy import person_readable, standard_hidden

    policy = SandboxPolicy(
        workspace=folder,
        hidden=tuple(standard_hidden(home)),
        read_only=True,
        env=_git_env(),
        cwd=folder,
        readable=tuple(person_readable()),
    )
    return sandbox_argv(argv, policy)
