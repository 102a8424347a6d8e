"""What find_files tells ripgrep: which files are in scope, and how matches are printed.

Hidden, git-ignored, dependency and build folders are skipped unless the search path names
them (docs/tools.md, find_files).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from atlas.sandbox.helpers import inside_repository, run_git
from atlas.tools.registry import RunContext

GIT_TIMEOUT_S = 5.0

# Dependency, cache and build folders: thousands of files nobody wrote, skipped even when no
# .gitignore names them (a fresh clone, a folder outside git). The hidden ones matter once a
# search adds --hidden.
SKIPPED_FOLDERS = (
    "node_modules", "bower_components", ".venv", "venv", "site-packages", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".gradle", ".next", ".nuxt",
    ".terraform", "Pods", "dist", "target", "AppData", ".git",
)  # fmt: skip


def _parts(run: RunContext, resolved: Path) -> tuple[str, ...]:
    """The parts of the searched path that say where it is: inside the workspace only the part
    below it (the home itself is often ~/.atlas, the workspace may sit under a build/)."""
    try:
        return resolved.relative_to(run.bot.workspace.resolve()).parts
    except ValueError:
        return resolved.parts


def skipped_folder_globs(run: RunContext, resolved: Path) -> list[str]:
    """rg globs that skip SKIPPED_FOLDERS at any depth, except those the path names."""
    named = set(_parts(run, resolved))
    return [f"--glob=!{name}/" for name in SKIPPED_FOLDERS if name not in named]


def _inside_hidden(run: RunContext, resolved: Path) -> bool:
    return any(p.startswith(".") and p not in (".", "..") for p in _parts(run, resolved))


def _may_be_ignored(resolved: Path, folder: Path) -> bool:
    top = resolved == folder and (folder / ".git").exists()
    return not top and inside_repository(folder)


async def _git_ignored(run: RunContext, resolved: Path, folder: Path) -> bool:
    """Whether git ignores the searched path. git runs in the bot's sandbox with every hook off
    (atlas/sandbox/helpers.py): the repository's config is the bot's to write. Outside any
    repository, or for a repository's top folder (never ignored: the common `path="."`), git
    is not started (a sandbox's start is most of its cost)."""
    if not await asyncio.to_thread(_may_be_ignored, resolved, folder):
        return False
    done = await run_git(
        run.home, run.bot, folder, ["check-ignore", "-q", "--", str(resolved)],
        timeout=GIT_TIMEOUT_S, stdout=False, reads_contents=False,
    )  # fmt: skip
    return done.returncode == 0


async def scope_flags(run: RunContext, resolved: Path, is_dir: bool, file_type: str) -> list[str]:
    """Hidden and ignored files are skipped, unless the search starts inside such a folder;
    `file_type` is one of rg's types (`rg --type-list`)."""
    flags = ["--hidden"] if _inside_hidden(run, resolved) else []
    if await _git_ignored(run, resolved, resolved if is_dir else resolved.parent):
        flags.append("--no-ignore")
    return [*flags, f"--type={file_type}"] if file_type else flags


@dataclass(frozen=True)
class Matching:
    """How content matches are found and shown."""

    output_mode: str
    context: int = 0
    before: int = 0  # Grep's -B: lines before a match, when more than context
    after: int = 0  # Grep's -A: lines after a match, when more than context
    ignore_case: bool = False
    multiline: bool = False  # a match may span lines; `.` matches a newline too

    def flags(self) -> list[str]:
        flags = ["--sort=path", "--color=never", "--with-filename"]
        if self.output_mode == "files_only":
            flags.append("--files-with-matches")
        elif self.output_mode == "count":
            flags += ["--count", "--null"]
        else:
            flags += [
                "--null",
                "--line-number",
                "--no-heading",
                "--max-columns=500",
                "--max-columns-preview",
            ]
            if self.context:
                flags.append(f"--context={self.context}")
            # rg lets -B and -A win over -C, in any order: give each only when it adds lines.
            if self.before > self.context:
                flags.append(f"--before-context={self.before}")
            if self.after > self.context:
                flags.append(f"--after-context={self.after}")
        if self.multiline:
            flags += ["--multiline", "--multiline-dotall"]
        return [*flags, "--ignore-case"] if self.ignore_case else flags
