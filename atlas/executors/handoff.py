"""The handoff packet: what another executor needs to go on with a task it did not start.

When a task's account reaches its plan's limit and its route names another executor, that
executor cannot resume the session (a harness reads only its own logs), so it starts a session
of its own from this packet: the goal, what was done, the diff so far, the open questions and
the last messages (docs/executors.md, Delegating).

The diff is read with git in the task's folder. A folder the harness wrote to is not trusted:
its `.git/config` could name hooks, filters or a diff program that git would run, so git runs
as every helper over a bot's files does (atlas/sandbox/helpers.py): inside the sandbox with
nothing writable and no network, every hook off (or, with no sandbox, on the host with every
hook and driver off and a scrubbed environment).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.sandbox.helpers import run_git

if TYPE_CHECKING:
    from atlas.home import Home

log = logging.getLogger(__name__)

DIFF_CHARS = 20_000  # of the diff in a packet; the stat is always whole
GIT_SECONDS = 20.0
LAST_MESSAGES = 6
DONE_ITEMS = 40


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
    try:
        done = await run_git(home, None, folder, args, timeout=GIT_SECONDS)
    except OSError as exc:  # the packet goes without a diff rather than not at all
        log.warning("handoff: git %s in %s failed: %s", args[0], folder, exc)
        return ""
    if done.returncode != 0:
        log.debug(
            "handoff: git %s in %s: %s", args[0], folder, done.stderr.decode(errors="replace")
        )
        return ""
    return done.stdout.decode("utf-8", errors="replace")
