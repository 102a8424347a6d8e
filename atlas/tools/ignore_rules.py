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
count them, above `.gitignore` in the same folder. ripgrep itself reads no ignore file of
the tree (`--no-ignore`): it would open them on the host, following a link the bot made to a
hidden file; each of its results is checked here instead (`IgnoreRules.ignored_below`, with a
verdict kept per folder), and it is given the patterns read here down to the searched folder
(`prune_patterns`, in a file of Atlas's own) so that it skips ignored folders without reading
them.
"""

from __future__ import annotations

import os
import stat
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
    _by_folder: dict[tuple[str, ...], GitIgnoreSpec | None] = field(default_factory=dict)
    _exclude: _Rules | None = None
    _verdicts: dict[tuple[str, ...], bool] = field(default_factory=dict)
    _lines: dict[tuple[str, ...], list[str]] = field(default_factory=dict)
    _exclude_lines: list[str] = field(default_factory=list)

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
                rules._exclude_lines = text.splitlines()
                rules._exclude = _Rules(top, GitIgnoreSpec.from_lines(rules._exclude_lines))
        return rules

    def _rules_in(self, folder: tuple[str, ...]) -> GitIgnoreSpec | None:
        """The patterns of the folder `folder` (its names below the top), read once."""
        if folder not in self._by_folder:
            place = self.top.joinpath(*folder)
            texts = [read_through_view(self.view, place / name) for name in IGNORE_FILES]
            lines = [line for text in texts if text for line in text.splitlines()]
            self._lines[folder] = lines
            self._by_folder[folder] = GitIgnoreSpec.from_lines(lines) if lines else None
        return self._by_folder[folder]

    def _decides(self, parts: tuple[str, ...], is_dir: bool) -> bool:
        """Whether the rules of the folders from the top down to the parent of `parts` (a path's
        names below the top) ignore that path itself; the deepest file decides, then
        `.git/info/exclude`. Paths are handled as names: this runs for every result."""
        slash = "/" if is_dir else ""
        for depth in range(len(parts) - 1, -1, -1):  # deepest first
            spec = self._rules_in(parts[:depth])
            if spec is None:
                continue
            include = spec.check_file("/".join(parts[depth:]) + slash).include
            if include is not None:
                return include
        if self._exclude is not None:  # below every .gitignore, as in git
            include = self._exclude.spec.check_file("/".join(parts) + slash).include
            return bool(include)
        return False

    def _below_top(self, path: Path) -> tuple[str, ...] | None:
        text, top = str(path), str(self.top)
        if text == top:
            return ()
        prefix = top if top.endswith("/") else top + "/"
        return tuple(text[len(prefix) :].split("/")) if text.startswith(prefix) else None

    def _verdict(self, parts: tuple[str, ...], is_dir: bool, keep: bool) -> bool:
        verdict = self._verdicts.get(parts)
        if verdict is None:
            verdict = ".git" in parts or self._decides(parts, is_dir)  # git never lists .git
            if keep:
                self._verdicts[parts] = verdict
        return verdict

    def ignored(self, path: Path, is_dir: bool) -> bool:
        """Whether `path` (resolved, below the top) is ignored, itself or by a folder above it."""
        parts = self._below_top(path)
        if not parts:
            return False
        last = len(parts)
        return any(
            self._verdict(parts[:depth], depth != last or is_dir, depth != last)
            for depth in range(1, last + 1)
        )

    def ignored_below(self, path: Path, root: Path) -> bool:
        """Whether `path`, a file found by a search of `root` (itself not ignored), is ignored:
        itself or a folder between `root` and it. Each folder's verdict is kept for the search."""
        parts, start = self._below_top(path), self._below_top(root)
        if parts is None or start is None or parts[: len(start)] != start or parts == start:
            return False
        last = len(parts)
        # rg reports files; the steps before are folders
        return any(
            self._verdict(parts[:depth], depth != last, depth != last)
            for depth in range(len(start) + 1, last + 1)
        )

    def prune_patterns(self, root: Path, cwd: Path) -> list[str]:
        """Patterns for rg's `--ignore-file` (matched from `cwd`, where rg runs) that let it
        skip, without going in, what the rules of the folders from the top down to the searched
        `root` (its own included) ignore: a big ignored `data/` is not read to be filtered
        after. Only a hint: every result is still checked (`ignored_below`), which also applies
        the files below `root`. None at all where one of these files re-includes a path (`!`),
        so nothing re-included is ever skipped."""
        start = self._below_top(root)
        if start is None:
            return []
        folders = [start[:depth] for depth in range(len(start) + 1)]
        for folder in folders:
            self._rules_in(folder)  # read, through the view, if not yet
        sources = [((), self._exclude_lines)] + [(f, self._lines.get(f, [])) for f in folders]
        patterns = [
            (folder, line.rstrip())
            for folder, lines in sources
            for line in lines
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if any(line.lstrip().startswith("!") for _, line in patterns):
            return []
        translated = (_for_rg(self.top.joinpath(*f), line, cwd) for f, line in patterns)
        return [pattern for pattern in translated if pattern]


def _for_rg(folder: Path, pattern: str, cwd: Path) -> str | None:
    """A `.gitignore` pattern of `folder` as one rg matches from `cwd`; None where it would
    not mean the same there (it is then left to the check of each result)."""
    if "\\" in pattern or pattern != pattern.lstrip() or not pattern.strip("/"):
        return None  # escapes, leading blanks, a lone slash: not translated
    anchored = "/" in pattern.rstrip("/")  # git: a slash before the end anchors to the folder
    if _within(folder, cwd):
        relative = folder.relative_to(cwd).as_posix()
        prefix = "" if relative == "." else relative + "/"
        if anchored:
            return "/" + prefix + pattern.lstrip("/")
        return f"/{prefix}**/{pattern}" if prefix else pattern
    if _within(cwd, folder) and not anchored:
        return pattern  # at any depth below a folder above cwd: at any depth from cwd
    return None


def _within(path: Path, folder: Path) -> bool:
    """`path` is `folder` or below it (as strings: it runs for every result of a search)."""
    text, top = str(path), str(folder)
    return text == top or text.startswith(top if top.endswith("/") else top + "/")


__all__ = ["IgnoreRules", "read_through_view", "repository_top"]
