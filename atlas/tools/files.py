"""File tools: read_file, write_file, edit_file, find_files (ripgrep).

Relative paths resolve against the bot's workspace; absolute paths and `~` are allowed (the approval
gate polices where a tool may reach). A file must be read in the conversation, and be unchanged
since, before write_file or edit_file may change it: the model never overwrites what it has not seen.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import hashlib
import os
import re
import shutil
import stat
import sysconfig
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Literal

from pydantic import Field

from atlas.errors import ToolError
from atlas.providers.base import Image
from atlas.tools.documents import (
    DOCUMENT_SUFFIXES,
    cached_markdown_file,
    document_text,
    is_document,
    unconvertible_reason,
)
from atlas.tools.registry import RunContext, Tool, ToolResult, tool

MAX_PAGE_LINES = 2000
MAX_PAGE_CHARS = 100_000
MAX_LINE_CHARS = 2000
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_DIFF_LINES = 300
SEARCH_TIMEOUT_S = 60.0
GIT_TIMEOUT_S = 5.0
IMAGE_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF8": "image/gif",
}

PathArg = Annotated[str, Field(description="relative to the workspace, or absolute")]


# ---- paths, hashes, atomic writes -------------------------------------------------------------


def _resolve(run: RunContext, path: str) -> Path:
    if not path.strip():
        raise ToolError("path is empty")
    p = Path(path).expanduser()
    return (p if p.is_absolute() else run.bot.workspace / p).resolve()


def _shown(run: RunContext, resolved: Path) -> str:
    """How a path is named in answers: relative to the workspace when inside it (shorter, and it
    resolves back to the same file), absolute otherwise."""
    try:
        rel = resolved.relative_to(run.bot.workspace.resolve())
    except ValueError:
        return str(resolved)
    return str(rel) if rel.parts else "."


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _umask() -> int:
    try:  # Linux: read it without the set-and-restore race of os.umask
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass  # not Linux: fall back to os.umask below
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_umask()


def _write_atomically(path: Path, data: bytes, shown: str) -> None:
    """Temp file in the same folder, then os.replace: a reader never sees half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = NEW_FILE_MODE  # mkstemp makes 0600; a new file gets the usual umask mode
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror} ({exc.filename})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_read_and_unchanged(
    hashes: dict[str, str], path: Path, shown: str, current: bytes
) -> None:
    known = hashes.get(str(path))
    if known is None:
        raise ToolError(
            f"{shown} exists but was not read in this conversation; read it first (read_file)"
        )
    if known != _sha256(current):
        raise ToolError(f"{shown} changed since you read it; read it again before changing it")


def _existing_bytes(path: Path, shown: str) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ToolError(f"{shown} is a folder, not a file") from None


# ---- read_file --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ImageFile:
    media_type: str
    data: bytes


def _image_type(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((t for sig, t in IMAGE_SIGNATURES.items() if head.startswith(sig)), None)


def _page(lines: Iterable[str], offset: int, limit: int, shown: str) -> str:
    """Lines numbered like `cat -n`, from `offset`, at most `limit` lines and MAX_PAGE_CHARS."""
    page: list[str] = []
    chars = total = 0
    next_offset: int | None = None
    for number, line in enumerate(lines, 1):
        total = number  # every line is consumed: the total is reported, and the caller hashes
        if number < offset or next_offset is not None:
            continue
        if len(line) > MAX_LINE_CHARS:
            line = (
                f"{line[:MAX_LINE_CHARS]}… [line cut: {len(line) - MAX_LINE_CHARS} more characters]"
            )
        entry = f"{number:>6}\t{line}"
        if number >= offset + limit or (page and chars + len(entry) > MAX_PAGE_CHARS):
            next_offset = number
            continue
        page.append(entry)
        chars += len(entry) + 1
    if total == 0:
        return f"({shown} is empty)"
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {shown} ({total} lines)")
    if next_offset is not None:
        page.append(
            f"… {total - next_offset + 1} more lines; call read_file with offset={next_offset}"
        )
    return "\n".join(page)


def _decoded_lines(f: BinaryIO, digest: hashlib._Hash, invalid: list[int]) -> Iterator[str]:
    for number, raw in enumerate(f, 1):
        digest.update(raw)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            invalid.append(number)
        yield line.removesuffix("\n").removesuffix("\r")


def _read_plain(path: Path, shown: str, offset: int, limit: int) -> tuple[str | _ImageFile, str]:
    """A text page or an image, and the sha256 of the file; one pass over the file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ToolError(f"{shown}: no such file") from None
    if stat.S_ISDIR(mode):
        raise ToolError(f"{shown} is a folder; list it with find_files(target='files')")
    if not stat.S_ISREG(mode):  # a FIFO or device would block the read forever
        raise ToolError(f"{shown} is not a regular file (a pipe, socket or device)")
    with path.open("rb") as f:
        head = f.read(8192)
        if media_type := _image_type(head):
            size = os.fstat(f.fileno()).st_size
            if size > MAX_IMAGE_BYTES:
                raise ToolError(
                    f"{shown} is a {media_type} image of {size} bytes; images over 5 MB are refused"
                )
            data = head + f.read()
            return _ImageFile(media_type, data), _sha256(data)
        if b"\0" in head:
            raise ToolError(
                f"{shown} is a binary file; read_file shows text, documents "
                f"({' '.join(DOCUMENT_SUFFIXES)}) and images (PNG, JPEG, GIF, WebP)"
            )
        f.seek(0)
        digest = hashlib.sha256()
        invalid: list[int] = []
        text = _page(_decoded_lines(f, digest, invalid), offset, limit, shown)
    if invalid:
        text += f"\n(not valid UTF-8 at line {invalid[0]}; undecodable bytes shown as \ufffd)"
    return text, digest.hexdigest()


@tool(read_only=True, pages_itself=True, aliases={"file_path": "path"})
async def read_file(
    run: RunContext,
    path: PathArg,
    offset: Annotated[int, Field(ge=1, description="first line to show")] = 1,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE_LINES)] = MAX_PAGE_LINES,
) -> str | ToolResult:
    """Read a file: numbered lines, paged. PDF, Word, PowerPoint, Excel and EPUB come as Markdown;
    PNG, JPEG, GIF and WebP as images. Read a file before you change it."""
    resolved = _resolve(run, path)
    shown = _shown(run, resolved)
    if reason := unconvertible_reason(resolved):
        raise ToolError(reason)
    if is_document(resolved) and await asyncio.to_thread(resolved.is_file):
        markdown = await document_text(run.home.documents_dir, resolved)
        digest = await asyncio.to_thread(_sha256_file, resolved)
        if not markdown.strip():
            answer = f"({shown} has no text: it may hold only scanned images)"
        else:
            answer = f"{shown} as Markdown:\n" + _page(markdown.splitlines(), offset, limit, shown)
        run.state.file_hashes[str(resolved)] = digest
        return answer
    content, digest = await asyncio.to_thread(_read_plain, resolved, shown, offset, limit)
    run.state.file_hashes[str(resolved)] = digest
    if not isinstance(content, _ImageFile):
        return content
    about = f"{shown}: {content.media_type} image, {len(content.data)} bytes"
    if not run.supports_images:
        return f"{about}. This model cannot see images."
    return ToolResult(
        text=about, images=[Image(content.media_type, base64.b64encode(content.data).decode())]
    )


# ---- write_file, edit_file --------------------------------------------------------------------


def _write_checked(hashes: dict[str, str], path: Path, shown: str, data: bytes) -> bool:
    """Write after the read-and-unchanged check; True when a file was replaced."""
    current = _existing_bytes(path, shown)
    if current is not None:
        _check_read_and_unchanged(hashes, path, shown, current)
    _write_atomically(path, data, shown)
    return current is not None


@tool(aliases={"file_path": "path"})
async def write_file(run: RunContext, path: PathArg, content: str) -> str:
    """Write a whole file (folders created). Replacing a file needs a read_file of it first;
    for small changes use edit_file."""
    resolved = _resolve(run, path)
    shown = _shown(run, resolved)
    data = content.encode("utf-8")
    replaced = await asyncio.to_thread(_write_checked, run.state.file_hashes, resolved, shown, data)
    run.state.file_hashes[str(resolved)] = _sha256(data)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return f"{'Replaced' if replaced else 'Created'} {shown}: {lines} lines, {len(data)} bytes"


def _in_line_endings_of(text: str, *strings: str) -> list[str]:
    """The strings in the file's own line endings, when the file has one style (CRLF or LF)."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    if crlf and not lf:
        return [s.replace("\r\n", "\n").replace("\n", "\r\n") for s in strings]
    if lf and not crlf:
        return [s.replace("\r\n", "\n") for s in strings]
    return list(strings)  # no line breaks, or mixed: take the strings as they are


def _line_numbers(text: str, needle: str, most: int = 10) -> str:
    numbers, start = [], 0
    while len(numbers) < most and (pos := text.find(needle, start)) >= 0:
        numbers.append(str(text.count("\n", 0, pos) + 1))
        start = pos + len(needle)
    return ", ".join(numbers)


def _diff(before: str, after: str, shown: str) -> str:
    lines = list(
        difflib.unified_diff(
            before.replace("\r\n", "\n").split("\n"),
            after.replace("\r\n", "\n").split("\n"),
            shown,
            shown,
            lineterm="",
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = [
            *lines[:MAX_DIFF_LINES],
            f"… diff cut: {cut} more lines (read_file to see the result)",
        ]
    return "\n".join(lines)


def _edit(
    hashes: dict[str, str], path: Path, shown: str, old: str, new: str, replace_all: bool
) -> tuple[str, str, int, str]:
    """Apply the edit; returns text before, text after, replacements, sha256 of the new bytes."""
    raw = _existing_bytes(path, shown)
    if raw is None:
        raise ToolError(f"{shown}: no such file; create it with write_file")
    _check_read_and_unchanged(hashes, path, shown, raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (byte {exc.start}); edit_file edits text only"
        ) from None
    old, new = _in_line_endings_of(text, old, new)
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string not found in {shown}; it must match exactly, indentation included "
            "(read the file again to copy it)"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string appears {count} times in {shown} (at lines {_line_numbers(text, old)}); "
            "add surrounding lines to make it unique, or set replace_all=true"
        )
    after = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    data = after.encode("utf-8")
    _write_atomically(path, data, shown)
    return text, after, count, _sha256(data)


@tool(aliases={"file_path": "path"})
async def edit_file(
    run: RunContext,
    path: PathArg,
    old_string: Annotated[str, Field(description="exact text to replace, indentation included")],
    new_string: str,
    replace_all: Annotated[bool, Field(description="replace every occurrence")] = False,
) -> str:
    """Replace old_string with new_string in a file read before; answers with the diff.
    old_string must occur once unless replace_all."""
    if not old_string:
        raise ToolError("old_string is empty; to create or replace a whole file use write_file")
    if old_string == new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")
    resolved = _resolve(run, path)
    shown = _shown(run, resolved)
    before, after, count, digest = await asyncio.to_thread(
        _edit, run.state.file_hashes, resolved, shown, old_string, new_string, replace_all
    )
    run.state.file_hashes[str(resolved)] = digest
    plural = "s" if count > 1 else ""
    return f"Edited {shown} ({count} replacement{plural}):\n{_diff(before, after, shown)}"


# ---- find_files -------------------------------------------------------------------------------


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


def _collector(results: _Results, mode: str, rename: Callable[[str], str]) -> Callable[[str], None]:
    """Turns rg's output lines (paths ended by NUL, see --null) into result lines."""

    def collect(raw: str) -> None:
        if mode in ("files", "files_only"):
            results.add(rename(raw), rename(raw), 0)
        elif raw == "--":  # rg's separator between context groups
            results.add(raw, None, 0)
        else:
            path, _, rest = raw.partition("\0")
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
    proc = await asyncio.create_subprocess_exec(
        rg, "--no-config", *args, cwd=cwd, limit=4 * 2**20,
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


def _inside_hidden(run: RunContext, resolved: Path) -> bool:
    try:  # inside the workspace only the part below it counts (the home itself is often ~/.atlas)
        parts = resolved.relative_to(run.bot.workspace.resolve()).parts
    except ValueError:
        parts = resolved.parts
    return any(p.startswith(".") and p not in (".", "..") for p in parts)


async def _git_ignored(resolved: Path, folder: Path) -> bool:
    git = shutil.which("git")
    if git is None:
        return False
    proc = await asyncio.create_subprocess_exec(
        git, "-C", str(folder), "check-ignore", "-q", "--", str(resolved),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        return await asyncio.wait_for(proc.wait(), GIT_TIMEOUT_S) == 0
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return False


async def _scope_flags(run: RunContext, resolved: Path, is_dir: bool) -> list[str]:
    """Hidden and ignored files are skipped, unless the search starts inside such a folder."""
    flags = ["--hidden"] if _inside_hidden(run, resolved) else []
    if await _git_ignored(resolved, resolved if is_dir else resolved.parent):
        flags.append("--no-ignore")
    return flags


def _content_flags(output_mode: str, context: int, ignore_case: bool) -> list[str]:
    flags = ["--sort=path", "--color=never", "--with-filename"]
    if output_mode == "files_only":
        flags.append("--files-with-matches")
    elif output_mode == "count":
        flags += ["--count", "--null"]
    else:
        flags += [
            "--null",
            "--line-number",
            "--no-heading",
            "--max-columns=500",
            "--max-columns-preview",
        ]
        if context:
            flags.append(f"--context={context}")
    return [*flags, "--ignore-case"] if ignore_case else flags


@dataclass
class _Search:
    """One find_files call: where rg runs, how results are named, and what went wrong."""

    run: RunContext
    rg: str
    cwd: Path
    deadline: float
    results: _Results
    stopped: bool = False
    notes: list[str] = field(default_factory=list)

    async def rg_lines(self, args: list[str], on_line: Callable[[str], None]) -> None:
        stopped, stderr = await _run_rg(self.rg, args, self.cwd, self.deadline, on_line)
        self.stopped = self.stopped or stopped
        if stderr:
            self.notes.append("rg: " + " | ".join(stderr.splitlines()[:3]))

    async def documents(
        self, arg: str, is_dir: bool, scope: list[str], file_glob: str | None
    ) -> list[str]:
        if not is_dir:
            return [arg]
        globs = ["--glob", file_glob] if file_glob else [f"--iglob=*{s}" for s in DOCUMENT_SUFFIXES]
        found: list[str] = []
        await self.rg_lines(["--files", "--sort=path", *scope, *globs, "--", arg], found.append)
        return [p for p in found if is_document(Path(p))]

    async def search_documents(self, documents: list[str], rg_args: list[str], mode: str) -> None:
        """Converts each document once (cached), then runs rg over the cached Markdown."""
        cached: dict[str, str] = {}
        failed: list[str] = []
        loop = asyncio.get_running_loop()
        for doc in documents:
            try:
                async with asyncio.timeout_at(self.deadline):
                    md = await cached_markdown_file(self.run.home.documents_dir, self.cwd / doc)
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
            collect = _collector(self.results, mode, lambda p: cached.get(p, p))
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


@tool(
    read_only=True,
    pages_itself=True,
    aliases={"glob": "file_glob", "-i": "ignore_case", "-C": "context", "head_limit": "limit"},
)
async def find_files(
    run: RunContext,
    pattern: Annotated[
        str, Field(description="regex (target=content) or file-name glob (target=files)")
    ],
    target: Literal["content", "files"] = "content",
    path: Annotated[str, Field(description="file or folder to search")] = ".",
    file_glob: Annotated[str | None, Field(description="only files matching, e.g. '*.py'")] = None,
    output_mode: Literal["content", "files_only", "count"] = "content",
    context: Annotated[int, Field(ge=0, le=10, description="lines around each match")] = 0,
    ignore_case: bool = False,
    limit: Annotated[int, Field(ge=1, le=500, description="result lines per page")] = 50,
    offset: Annotated[int, Field(ge=0, description="result lines to skip")] = 0,
) -> str:
    """Search with ripgrep: file contents by regex (documents such as PDF and Word too), or file
    names by glob (target=files). Skips hidden and git-ignored files unless path is inside them."""
    if target == "files" and file_glob:
        raise ToolError(
            "file_glob is for target=content; with target=files put the glob in pattern"
        )
    rg = _ripgrep()
    resolved = _resolve(run, path)
    shown = _shown(run, resolved)
    is_dir = await asyncio.to_thread(resolved.is_dir)
    if not is_dir and not await asyncio.to_thread(resolved.exists):
        raise ToolError(f"{shown}: no such file or folder")
    workspace = run.bot.workspace.resolve()
    cwd = workspace if await asyncio.to_thread(workspace.is_dir) else Path(resolved.anchor)
    arg = shown if cwd == workspace else str(resolved)
    loop = asyncio.get_running_loop()
    search = _Search(run, rg, cwd, loop.time() + SEARCH_TIMEOUT_S, _Results(offset, limit))
    scope = await _scope_flags(run, resolved, is_dir)
    mode = "files" if target == "files" else output_mode
    if target == "files":
        glob_flag = "--iglob" if ignore_case else "--glob"
        args = ["--files", "--sort=path", *scope, glob_flag, pattern, "--", arg]
        await search.rg_lines(args, _collector(search.results, mode, _strip_dot))
    else:
        flags = [*_content_flags(output_mode, context, ignore_case), "--regexp", pattern]
        if is_dir or not is_document(resolved):
            skip_documents = [f"--iglob=!*{s}" for s in DOCUMENT_SUFFIXES]  # searched as Markdown
            globs = ["--glob", file_glob] if file_glob else []
            args = [*flags, *scope, *globs, *skip_documents, "--", arg]
            await search.rg_lines(args, _collector(search.results, mode, _strip_dot))
        if not search.stopped and (is_dir or is_document(resolved)):
            documents = await search.documents(arg, is_dir, scope, file_glob)
            await search.search_documents(documents, flags, mode)
    parts = []
    if search.stopped:
        parts.append(f"Search stopped after {SEARCH_TIMEOUT_S:g} s; the results are partial.")
    parts += search.results.page
    parts.append(_summary(search.results, target, mode, shown, pattern))
    parts += search.notes
    return "\n".join(parts)


FILE_TOOLS: list[Tool] = [read_file, write_file, edit_file, find_files]
