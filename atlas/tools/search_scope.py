"""What find_files tells ripgrep: which files are in scope, and how matches are printed.

Hidden, ignored (.gitignore, in-process), dependency and build folders are skipped unless the search path names
them (docs/tools.md, find_files).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from atlas.tools.fences import Fence
from atlas.tools.ignore_rules import IgnoreRules
from atlas.tools.registry import RunContext

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


@dataclass
class Scope:
    """rg's flags for what is in scope, and the ignore rules each result is checked against
    (rg reads no ignore file itself: `--no-ignore`)."""

    flags: list[str]
    rules: IgnoreRules | None = None
    root: Path | None = None
    ignore_file: Path | None = None  # rg's --ignore-file: what it may skip without going in

    def hides(self, found: Path) -> bool:
        if self.rules is None or self.root is None:
            return False
        return self.rules.ignored_below(found, self.root)

    def close(self) -> None:
        if self.ignore_file is not None:
            self.ignore_file.unlink(missing_ok=True)


def _prune_file(rules: IgnoreRules, root: Path, cwd: Path) -> Path | None:
    """The patterns rg may skip folders by, in a file of Atlas's own (removed by Scope.close)."""
    patterns = rules.prune_patterns(root, cwd)
    if not patterns:
        return None
    fd, name = tempfile.mkstemp(prefix="atlas-ignore-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write("\n".join(patterns) + "\n")
    return Path(name)


def _ignore_rules(run: RunContext, resolved: Path, is_dir: bool) -> IgnoreRules | None:
    """The rules results are checked against; None when the searched path is itself ignored
    (the search then sees everything in it)."""
    view = Fence.for_run(run).view
    rules = IgnoreRules.around(view, resolved, run.bot.workspace.resolve())
    return None if rules.ignored(resolved, is_dir) else rules


async def scope_flags(
    run: RunContext, resolved: Path, is_dir: bool, file_type: str, cwd: Path
) -> Scope:
    """Hidden and ignored files are skipped, unless the search starts inside such a folder;
        `file_type` is one of rg's types (`rg --type-list`). Ignore rules are matched in-process
        (atlas/tools/ignore_rules.py: no git runs, every ignore file is read through the view),
        inside a repository or not; rg itself reads none (`--no-ignore`), nor the person's global
        one; rg is given the patterns of the folders down to the searched one that it may skip folders
    by (`--ignore-file`, a file of Atlas's own). A search starting inside an ignored folder sees
    everything in it."""
    flags = [*(["--hidden"] if _inside_hidden(run, resolved) else []), "--no-ignore"]
    rules = await asyncio.to_thread(_ignore_rules, run, resolved, is_dir)
    scope = Scope(flags, rules, resolved)
    if rules is not None and is_dir:
        scope.ignore_file = await asyncio.to_thread(_prune_file, rules, resolved, cwd)
        if scope.ignore_file is not None:
            flags.append(f"--ignore-file={scope.ignore_file}")
    if file_type:
        flags.append(f"--type={file_type}")
    return scope


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
