"""find_files: file contents by regex, or file names by glob, with ripgrep (documents as Markdown).

Hidden and git-ignored files, and dependency and build folders, are skipped unless the search
starts inside them (search_scope.py); a search stops at SEARCH_TIMEOUT_S and answers with what it
found so far, one page of result lines at a time.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from atlas.errors import ToolError
from atlas.sandbox.helpers import helper_env
from atlas.tools.documents import DOCUMENT_SUFFIXES, cached_markdown_file, is_document
from atlas.tools.fences import UNREACHABLE_AREAS, Fence, fenced_inodes, inside
from atlas.tools.paths import judged_path, shown_path
from atlas.tools.registry import RunContext, tool
from atlas.tools.search_scope import Matching, scope_flags, skipped_folder_globs

SEARCH_TIMEOUT_S = 60.0


def _ripgrep() -> str:
    bundled = Path(sysconfig.get_path("scripts")) / "rg"
    if bundled.exists():
        return str(bundled)  # the pinned one first: its flags are the ones tested
    if found := shutil.which("rg"):
        return found
    raise ToolError(
        "ripgrep (rg) is not installed; install it (`apt install ripgrep`) or run `uv sync`"
    )


@dataclass
class _Results:
    """Counts every result line and keeps only the requested page of them."""

    offset: int
    limit: int
    total: int = 0
    weight: int = 0  # matching lines (content and count modes)
    files: set[str] = field(default_factory=set)
    page: list[str] = field(default_factory=list)

    def add(self, line: str, file: str | None, weight: int) -> None:
        if file is not None:
            self.files.add(file)
        self.weight += weight
        if self.offset <= self.total < self.offset + self.limit:
            self.page.append(line)
        self.total += 1


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _collector(
    results: _Results, mode: str, rename: Callable[[str], str], keep: Callable[[str], bool]
) -> Callable[[str], None]:
    """Turns rg's output lines (paths ended by NUL, see --null) into result lines; lines of
    files outside the fence (`keep` false) are dropped."""

    def collect(raw: str) -> None:
        if mode in ("files", "files_only"):
            if keep(raw):
                results.add(rename(raw), rename(raw), 0)
        elif raw == "--":  # rg's separator between context groups
            results.add(raw, None, 0)
        else:
            path, _, rest = raw.partition("\0")
            if not keep(path):
                return
            name = rename(path)
            if mode == "count":
                results.add(f"{name}:{rest}", name, int(rest) if rest.isdigit() else 0)
            else:  # rest is "12:text" for a match, "12-text" for context
                separator = ":" if re.match(r"\d+:", rest) else "-"
                results.add(f"{name}{separator}{rest}", name, separator == ":")

    return collect


async def _drain(stream: asyncio.StreamReader, keep: int = 64 * 1024) -> bytes:
    """Reads a stream to its end (so the writer never blocks on a full pipe), keeping the start."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < keep:
            kept += chunk[: keep - len(kept)]
    return bytes(kept)


async def _run_rg(
    rg: str, args: list[str], cwd: Path, deadline: float, on_line: Callable[[str], None]
) -> tuple[bool, str]:
    """Runs rg until done or the deadline; returns (stopped, stderr)."""
    # On the host (it must see what the file tools see; every result is checked against the
    # fence), with no config file and a scrubbed environment: rg then runs no program.
    proc = await asyncio.create_subprocess_exec(
        rg, "--no-config", *args, cwd=cwd, env=helper_env(), limit=4 * 2**20,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.create_task(_drain(proc.stderr))
    lines, stopped = 0, False
    try:
        async with asyncio.timeout_at(deadline):
            while raw := await proc.stdout.readline():
                on_line(raw.decode("utf-8", errors="replace").removesuffix("\n"))
                lines += 1
            await proc.wait()
    except TimeoutError:
        stopped = True
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        stderr = (await errors).decode("utf-8", errors="replace").strip()
    if proc.returncode == 2 and not lines and not stopped:
        raise ToolError(f"rg: {stderr[:1000]}")
    return stopped, stderr


GLOB_SPECIAL = re.compile(r"([*?\[\]{}\\!])")
GLOB_HINT = (
    "The pattern {pattern!r} looks like a file-name glob; pattern is a regex for contents. "
    'To find files by name: target="files", pattern {pattern!r}. To search only such files: '
    "file_glob {pattern!r} with a regex pattern."
)


def looks_like_glob(pattern: str) -> bool:
    """`**/*.py`, `*.md`, `src/*.ts`: a name glob given as a content regex (Claude Code's
    Glob habit), not a regex with a wildcard such as `.*foo`."""
    if ".*" in pattern or "\\" in pattern:
        return False
    return pattern.startswith("*") or "**" in pattern or "/*" in pattern or "*." in pattern


@dataclass
class _FenceFilter:
    """What a search leaves out: the vault always; searched from outside the home's private
    areas (the workspace, or a folder above the home), every private area too. rg is told to
    skip them (globs), and every result is checked again here, on the path found (a glob
    that misses cannot leak), with hard links into fenced folders dropped too."""

    fence: Fence
    cwd: Path
    from_outside: bool
    fenced: frozenset[tuple[int, int]] | None
    dropped: int = 0
    _seen: dict[str, bool] = field(default_factory=dict)
    # Ignored by a .gitignore above the searched folder (search_scope.Scope.hides): rg is not
    # told of those files, so its results are checked here; not counted as dropped.
    ignored: Callable[[Path], bool] = lambda _path: False

    @classmethod
    async def for_search(cls, fence: Fence, cwd: Path, root: Path) -> _FenceFilter:
        fenced = await asyncio.to_thread(fenced_inodes, fence.home, fence.vault)
        return cls(fence, cwd, fence.area(root) in ("workspace", "outside"), fenced)

    def globs(self, root: Path) -> list[str]:
        trees = self.fence.private_trees() if self.from_outside else [self.fence.vault]
        trees += self.fence.view.hidden_below(root)  # not walked; results are checked anyway
        globs = []
        for tree in trees:
            if tree == root or not inside(tree, root):
                continue  # not below the search: nothing to skip
            if inside(tree, self.cwd):  # rg matches paths below its folder relative to it
                globs.append("--glob=!/" + _glob_escape(str(tree.relative_to(self.cwd))))
            else:
                globs.append("--glob=!**" + _glob_escape(str(tree)))
        return globs

    def keep(self, found: str) -> bool:
        known = self._seen.get(found)
        if known is None:
            path = Path(os.path.normpath(self.cwd / found))
            if not self._in_view(path) or self.ignored(path):
                known = self._seen[found] = False  # not counted: it does not exist for the bot
                return known
            known = self._seen[found] = self._allowed(path)
            self.dropped += not known
        return known

    def _in_view(self, path: Path) -> bool:
        """The path as found, and the file it really is, both in the bot's view."""
        view = self.fence.view
        if not (view.sees(path) and view.sees(Path(os.path.realpath(path)))):
            return False
        try:
            return not view.hard_link_hidden(path.stat(), path)
        except OSError:
            return True  # gone meanwhile: nothing of it is shown beyond what rg printed

    def _allowed(self, path: Path) -> bool:
        # The path as found and the file it really is: rg follows a symlink named as the
        # search's root, so a root swapped for a link after the check shows here.
        for seen in (path, Path(os.path.realpath(path))):
            area = self.fence.area(seen)
            if area in UNREACHABLE_AREAS or (
                self.from_outside and area not in ("workspace", "outside")
            ):
                return False
        try:
            st = path.lstat()
        except OSError:
            return True  # gone meanwhile: nothing of it is shown beyond what rg printed
        if st.st_nlink > 1 and stat.S_ISREG(st.st_mode) and area in ("workspace", "outside"):
            return self.fenced is not None and (st.st_dev, st.st_ino) not in self.fenced
        return True


def _glob_escape(text: str) -> str:
    return GLOB_SPECIAL.sub(r"\\\1", text)


@dataclass
class _Search:
    """One find_files call: where rg runs, how results are named, and what went wrong."""

    run: RunContext
    rg: str
    cwd: Path
    deadline: float
    results: _Results
    fence: _FenceFilter
    stopped: bool = False
    notes: list[str] = field(default_factory=list)

    async def rg_lines(self, args: list[str], on_line: Callable[[str], None]) -> None:
        stopped, stderr = await _run_rg(self.rg, args, self.cwd, self.deadline, on_line)
        self.stopped = self.stopped or stopped
        if stderr:
            self.notes.append("rg: " + " | ".join(stderr.splitlines()[:3]))

    async def documents(
        self, arg: str, is_dir: bool, scope: list[str], file_glob: str | None, fences: list[str]
    ) -> list[str]:
        if not is_dir:
            return [arg]
        if file_glob:
            globs = ["--glob", file_glob]
        elif any(flag.startswith("--type=") for flag in scope):
            globs = []  # the type chooses (type=pdf finds PDFs); a glob would override it
        else:
            globs = [f"--iglob=*{s}" for s in DOCUMENT_SUFFIXES]
        found: list[str] = []
        args = ["--files", "--sort=path", *scope, *globs, *fences, "--", arg]
        await self.rg_lines(args, found.append)
        return [p for p in found if is_document(Path(p)) and self.fence.keep(p)]

    async def search_documents(self, documents: list[str], rg_args: list[str], mode: str) -> None:
        """Converts each document once (cached), then runs rg over the cached Markdown."""
        cached: dict[str, str] = {}
        failed: list[str] = []
        loop = asyncio.get_running_loop()
        for doc in documents:
            try:
                async with asyncio.timeout_at(self.deadline):
                    md = await cached_markdown_file(
                        self.run.home.documents_dir, self.cwd / doc, self.fence.fence.open_file
                    )
            except TimeoutError:
                self.stopped = True
                break
            except ToolError as exc:
                failed.append(str(exc))
                continue
            cached[str(md)] = _strip_dot(doc)
        if failed:
            self.notes.append(f"{len(failed)} documents not searched: " + "; ".join(failed[:3]))
        if cached and loop.time() < self.deadline:
            collect = _collector(self.results, mode, lambda p: cached.get(p, p), lambda p: True)
            await self.rg_lines([*rg_args, "--", *cached], collect)


def _summary(results: _Results, target: str, mode: str, where: str, pattern: str) -> str:
    if results.total == 0:
        return f"No {'files' if target == 'files' else 'matches'} for {pattern!r} in {where}."
    if target == "files" or mode == "files_only":
        what = f"{results.total} files"
    elif mode == "count":
        what = f"{results.weight} matching lines in {results.total} files"
    else:
        what = f"{results.weight} matching lines in {len(results.files)} files"
    first, last = results.offset + 1, results.offset + len(results.page)
    if not results.page:
        return f"({what}; {results.total} result lines; offset {results.offset} is past the end)"
    more = f"; next page: call find_files with offset={last}" if last < results.total else ""
    return f"({what}; result lines {first}-{last} of {results.total}{more})"


async def _search_root(run: RunContext, resolved: Path, shown: str) -> tuple[Path, str]:
    """Where rg runs and what it is told to search: the workspace, so that results come out
    relative to it, unless it does not exist yet."""
    workspace = run.bot.workspace.resolve()
    cwd = workspace if await asyncio.to_thread(workspace.is_dir) else Path(resolved.anchor)
    return cwd, shown if cwd == workspace else str(resolved)


def _answer(search: _Search, summary: str) -> str:
    """The page of result lines, after a warning if the search was cut short, before the notes."""
    parts = []
    if search.stopped:
        parts.append(f"Search stopped after {SEARCH_TIMEOUT_S:g} s; the results are partial.")
    parts += search.results.page
    parts.append(summary)
    parts += search.notes
    if search.fence.dropped:
        parts.append(
            f"({search.fence.dropped} files in the vault or the Atlas home's private areas "
            "were left out)"
        )
    return "\n".join(parts)


@tool(
    read_only=True,
    pages_itself=True,
    aliases={
        "glob": "file_glob",
        "-i": "ignore_case",
        "-C": "context",
        "-A": "context_after",
        "-B": "context_before",
        "type": "file_type",
        "head_limit": "limit",
        "-n": "line_numbers",
    },
    value_aliases={"output_mode": {"files_with_matches": "files_only"}},
    hidden={"line_numbers"},
)
async def find_files(
    run: RunContext,
    pattern: Annotated[
        str, Field(description="regex (target=content) or file-name glob (target=files)")
    ],
    target: Literal["content", "files"] = "content",
    path: Annotated[str, Field(description="file or folder to search")] = ".",
    file_glob: Annotated[str | None, Field(description="only files matching, e.g. '*.py'")] = None,
    file_type: Annotated[str, Field(description="rg file type, e.g. py, js")] = "",
    output_mode: Literal["content", "files_only", "count"] = "content",
    context: Annotated[int, Field(ge=0, le=10, description="lines around each match")] = 0,
    context_before: Annotated[int, Field(ge=0, le=10)] = 0,
    context_after: Annotated[int, Field(ge=0, le=10)] = 0,
    ignore_case: bool = False,
    multiline: Annotated[bool, Field(description="a match may span lines")] = False,
    limit: Annotated[int, Field(ge=1, le=500, description="result lines per page")] = 50,
    offset: Annotated[int, Field(ge=0, description="result lines to skip")] = 0,
    line_numbers: bool = True,  # Claude Code's -n: content lines always carry their number
) -> str:
    """Search with ripgrep: file contents by regex (documents such as PDF and Word too), or file
    names by glob (target=files). Skips hidden, git-ignored, dependency and build folders
    (node_modules, .venv, dist, target...) unless path is inside them."""
    if target == "files" and (file_glob or file_type):
        raise ToolError(
            "file_glob and file_type are for target=content; with target=files put the glob "
            "in pattern"
        )
    rg = _ripgrep()
    resolved = judged_path(run, "find_files", path)
    shown = shown_path(run, resolved)
    fence = Fence.for_run(run)
    if not fence.view.sees(resolved):  # hidden: missing, whatever the pattern (no oracle)
        raise ToolError(f"{shown}: no such file or folder")
    fence.refuse_reading(resolved, shown)
    is_dir = await asyncio.to_thread(resolved.is_dir)
    if not is_dir and not await asyncio.to_thread(resolved.exists):
        raise ToolError(f"{shown}: no such file or folder")
    cwd, arg = await _search_root(run, resolved, shown)
    loop = asyncio.get_running_loop()
    fenced = await _FenceFilter.for_search(fence, cwd, resolved)
    search = _Search(run, rg, cwd, loop.time() + SEARCH_TIMEOUT_S, _Results(offset, limit), fenced)
    found_scope = await scope_flags(run, resolved, is_dir, file_type, cwd)
    scope, fenced.ignored = found_scope.flags, found_scope.hides
    try:
        # Last before "--": rg's later globs win over earlier ones, the model's file_glob included.
        fences = [*skipped_folder_globs(run, resolved), *fenced.globs(resolved)]
        mode = "files" if target == "files" else output_mode
        if target == "files":
            glob_flag = "--iglob" if ignore_case else "--glob"
            args = ["--files", "--sort=path", *scope, glob_flag, pattern, *fences, "--", arg]
            await search.rg_lines(args, _collector(search.results, mode, _strip_dot, fenced.keep))
        else:
            matching = Matching(
                output_mode, context, context_before, context_after, ignore_case, multiline
            )
            flags = [*matching.flags(), "--regexp", pattern]
            if is_dir or not is_document(resolved):
                # Documents are searched as Markdown, below.
                skip_documents = [f"--iglob=!*{s}" for s in DOCUMENT_SUFFIXES]
                globs = ["--glob", file_glob] if file_glob else []
                args = [*flags, *scope, *globs, *skip_documents, *fences, "--", arg]
                try:
                    await search.rg_lines(
                        args, _collector(search.results, mode, _strip_dot, fenced.keep)
                    )
                except ToolError as exc:
                    if looks_like_glob(pattern):
                        raise ToolError(f"{exc}\n{GLOB_HINT.format(pattern=pattern)}") from None
                    raise
            if not search.stopped and (is_dir or is_document(resolved)):
                documents = await search.documents(arg, is_dir, scope, file_glob, fences)
                await search.search_documents(documents, flags, mode)
    finally:
        found_scope.close()
    if target == "content" and not search.results.total and looks_like_glob(pattern):
        search.notes.append(GLOB_HINT.format(pattern=pattern))
    return _answer(search, _summary(search.results, target, mode, shown, pattern))
