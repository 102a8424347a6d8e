"""Ignore rules for find_files, matched in-process (issue 32): no git, no program at all.

`.gitignore` files and a repository's `.git/info/exclude` are read through the bot's view (a
hidden file, or a link leading to one, is not read: it does not exist for the bot) and matched
with pathspec's GitIgnoreSpec, git's own wildmatch rules. Since nothing is started, nothing a bot
writes into a repository's config (an fsmonitor, hooks, filters) can run.

Where rules come from (docs/tools.md, find_files): the files in each folder from the top down to
the path, the deepest deciding; a path inside an ignored folder is ignored (git cannot re-include
it either). The top is the repository around the path (the nearest folder holding `.git`), else
the bot's workspace when the path is inside it, else the searched folder: a `.gitignore` outside
a repository counts too. ripgrep's own ignore files (`.ignore`, `.rgignore`) count as it would
count them, above `.gitignore` in the same folder. ripgrep itself reads no ignore file
(`--no-ignore`): it would open them on the host, following a link the bot made to a hidden file;
each of its results is checked here instead (`IgnoreRules.ignored`, with a verdict kept per
folder).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

from atlas.sandbox.view import View, under

# In one folder, a later file wins over an earlier one (ripgrep: .rgignore > .ignore > .gitignore).
IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")
EXCLUDE_FILE = Path(".git/info/exclude")
MAX_IGNORE_BYTES = 1024 * 1024  # git reads bigger ones; a bot's 1 MB of patterns is plenty


def read_through_view(view: View, path: Path) -> str | None:
    """The text of a small regular file the view shows, else None (missing, hidden, reached
    through a link to a hidden file, a hard link to one, a FIFO, too big)."""
    try:
        os.lstat(path)
    except OSError:
        return None  # most folders have none of the three names: no resolution for them
    real = view.resolve(path)
    if not view.sees(real):
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_IGNORE_BYTES:
            return None
        if view.hard_link_hidden(st, real):
            return None
        return handle.read(MAX_IGNORE_BYTES).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class _Rules:
    folder: Path  # patterns are relative to it
    spec: GitIgnoreSpec


def repository_top(folder: Path) -> Path | None:
    """The nearest folder from `folder` up that holds `.git` (git's own search)."""
    return next((p for p in (folder, *folder.parents) if (p / ".git").exists()), None)


@dataclass
class IgnoreRules:
    """The rules of one search: loaded once per folder, checked per path."""

    view: View
    top: Path
    _by_folder: dict[Path, _Rules | None] = field(default_factory=dict)
    _exclude: _Rules | None = None
    _verdicts: dict[Path, bool] = field(default_factory=dict)

    @classmethod
    def around(cls, view: View, path: Path, workspace: Path) -> IgnoreRules:
        """The rules that apply to `path` (resolved) and below it."""
        folder = path if path.is_dir() else path.parent
        top = repository_top(folder)
        if top is None:
            top = workspace if under(path, workspace) else folder
        rules = cls(view, top)
        if (top / ".git").exists():
            text = read_through_view(view, top / EXCLUDE_FILE)
            if text:
                rules._exclude = _Rules(top, GitIgnoreSpec.from_lines(text.splitlines()))
        return rules

    def _rules_in(self, folder: Path) -> _Rules | None:
        if folder not in self._by_folder:
            texts = [read_through_view(self.view, folder / name) for name in IGNORE_FILES]
            lines = [line for text in texts if text for line in text.splitlines()]
            spec = GitIgnoreSpec.from_lines(lines) if lines else None
            self._by_folder[folder] = _Rules(folder, spec) if spec else None
        return self._by_folder[folder]

    def _decides(self, path: Path, is_dir: bool) -> bool:
        """Whether the rules of the folders from the top down to `path`'s parent ignore `path`
        itself; the deepest file decides."""
        parts = path.relative_to(self.top).parts
        folders = [self.top.joinpath(*parts[:depth]) for depth in range(len(parts) - 1, -1, -1)]
        candidates = [self._rules_in(f) for f in folders]  # deepest first
        if self._exclude is not None:
            candidates.append(self._exclude)  # below every .gitignore, as in git
        for rules in candidates:
            if rules is None:
                continue
            relative = path.relative_to(rules.folder).as_posix() + ("/" if is_dir else "")
            include = rules.spec.check_file(relative).include
            if include is not None:
                return include
        return False

    @staticmethod
    def _steps(path: Path, start: Path) -> Iterator[Path]:
        """`path`'s folders below `start`, outermost first, then `path`."""
        parts = path.relative_to(start).parts
        for depth in range(1, len(parts) + 1):
            yield start.joinpath(*parts[:depth])

    def ignored(self, path: Path, is_dir: bool) -> bool:
        """Whether `path` (resolved, below the top) is ignored, itself or by a folder above it."""
        if not _within(path, self.top) or path == self.top:
            return False
        for step in self._steps(path, self.top):
            if ".git" in step.relative_to(self.top).parts:
                return True  # git never lists its own folder
            if self._decides(step, step != path or is_dir):
                return True
        return False

    def ignored_below(self, path: Path, root: Path) -> bool:
        """Whether `path`, a file found by a search of `root` (itself not ignored), is ignored:
        itself or a folder between `root` and it. Each folder's verdict is kept for the search."""
        if not _within(path, self.top) or not _within(path, root) or path == root:
            return False
        for step in self._steps(path, root):
            verdict = self._verdicts.get(step)
            if verdict is None:
                is_dir = step != path  # rg reports files; the steps before are folders
                inside_git = ".git" in step.relative_to(self.top).parts
                verdict = inside_git or self._decides(step, is_dir)
                if step != path:
                    self._verdicts[step] = verdict
            if verdict:
                return True
        return False


def _within(path: Path, folder: Path) -> bool:
    """`path` is `folder` or below it (as strings: it runs for every result of a search)."""
    text, top = str(path), str(folder)
    return text == top or text.startswith(top if top.endswith("/") else top + "/")


__all__ = ["IgnoreRules", "read_through_view", "repository_top"]
