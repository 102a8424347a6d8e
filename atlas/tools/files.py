"""File tools: read_file, write_file, edit_file; find_files (ripgrep) lives in search_files.

Relative paths resolve against the bot's workspace; absolute paths and `~` are allowed (the approval
gate polices where a tool may reach). A file must be read in the conversation, and be unchanged
since, before write_file or edit_file may change it: the model never overwrites what it has not seen.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, BinaryIO

from pydantic import Field

from atlas.errors import ToolError
from atlas.providers.base import Image
from atlas.sandbox import budget
from atlas.tools.documents import (
    DOCUMENT_SUFFIXES,
    is_document,
    markdown_file_for,
    unconvertible_reason,
)
from atlas.tools.fences import Fence
from atlas.tools.file_batch import (
    EditEntry,
    EntryPaths,
    Outcome,
    ReadEntry,
    WriteEntry,
    entries_field,
    per_file,
    refuse_repeats,
    report,
    run_each,
    single_or_batch,
)
from atlas.tools.file_reading import blocking_reason, cut_line, decoded_lines
from atlas.tools.file_writes import (
    NEW_FILE_MODE,
    check_read_and_unchanged,
    diff_of,
    existing_bytes,
    in_line_endings_of,
    line_numbers,
    sha256_of,
    write_atomically,
)
from atlas.tools.paths import PathArg, judged_path, shown_path
from atlas.tools.registry import RunContext, Tool, ToolResult, tool
from atlas.tools.search_files import find_files
from atlas.trust.read_taint import remember_read

MAX_PAGE_LINES = 2000
MAX_PAGE_CHARS = 100_000
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_BATCH_IMAGES = 5  # images in one read_file call with `reads`: each may be 5 MB
IMAGE_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF8": "image/gif",
}


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
    """Lines numbered like `cat -n`, from `offset`, at most `limit` lines and MAX_PAGE_CHARS.
    Each line comes already cut to MAX_LINE_CHARS (`cut_line`)."""
    page: list[str] = []
    chars = total = 0
    next_offset: int | None = None
    for number, line in enumerate(lines, 1):
        total = number  # every line is consumed: the total is reported, and the caller hashes
        if number < offset or next_offset is not None:
            continue
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


def _read_plain(
    fence: Fence, path: Path, shown: str, offset: int, limit: int
) -> tuple[str | _ImageFile, str]:
    """A text page or an image, and the sha256 of the file; one open, one pass over the file."""
    f, st = _open_existing(fence, path, shown)
    with f:
        head = f.read(8192)
        if media_type := _image_type(head):
            if st.st_size > MAX_IMAGE_BYTES:
                raise ToolError(
                    f"{shown} is a {media_type} image of {st.st_size} bytes; "
                    "images over 5 MB are refused"
                )
            data = head + f.read()
            return _ImageFile(media_type, data), sha256_of(data)
        if b"\0" in head:
            raise ToolError(
                f"{shown} is a binary file; read_file shows text, documents "
                f"({' '.join(DOCUMENT_SUFFIXES)}) and images (PNG, JPEG, GIF, WebP)"
            )
        f.seek(0)
        digest = hashlib.sha256()
        invalid: list[int] = []
        text = _page(decoded_lines(f, digest, invalid), offset, limit, shown)
    if invalid:
        text += f"\n(not valid UTF-8 at line {invalid[0]}; undecodable bytes shown as \ufffd)"
    return text, digest.hexdigest()


def _open_existing(fence: Fence, path: Path, shown: str) -> tuple[BinaryIO, os.stat_result]:
    if not fence.view.sees(path):  # before any stat: what is hidden says nothing of itself
        raise ToolError(f"{shown}: no such file")
    if reason := blocking_reason(path, shown):
        raise ToolError(reason)
    try:
        return fence.open_file(path, shown)
    except FileNotFoundError:
        raise ToolError(f"{shown}: no such file") from None


def _read_document(fence: Fence, documents_dir: Path, path: Path, shown: str) -> tuple[str, str]:
    """A document's Markdown and the sha256 of the document, from one open of it."""
    f, st = _open_existing(fence, path, shown)
    with f:
        digest = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
        f.seek(0)
        markdown_file = markdown_file_for(documents_dir, path, f, st)
    return markdown_file.read_text(encoding="utf-8"), digest.hexdigest()


async def _read_one(
    run: RunContext, resolved: Path, offset: int, limit: int
) -> tuple[ToolResult, str]:
    """One file's answer and the sha256 of its bytes (the caller records it as read)."""
    shown = shown_path(run, resolved)
    if reason := unconvertible_reason(resolved):
        raise ToolError(reason)
    fence = Fence.for_run(run)
    if is_document(resolved):
        markdown, digest = await asyncio.to_thread(
            _read_document, fence, run.home.documents_dir, resolved, shown
        )
        if not markdown.strip():
            answer = f"({shown} has no text: it may hold only scanned images)"
        else:
            lines = (cut_line(line) for line in markdown.splitlines())
            answer = f"{shown} as Markdown:\n" + _page(lines, offset, limit, shown)
        return ToolResult(answer, untrusted=True), digest  # a document's text may come from anyone
    content, digest = await asyncio.to_thread(_read_plain, fence, resolved, shown, offset, limit)
    if not isinstance(content, _ImageFile):
        return ToolResult(content), digest
    about = f"{shown}: {content.media_type} image, {len(content.data)} bytes"
    if not run.supports_images:
        return ToolResult(f"{about}. This model cannot see images."), digest
    image = Image(content.media_type, base64.b64encode(content.data).decode())
    return ToolResult(text=about, images=[image]), digest


@tool(
    read_only=True,
    pages_itself=True,
    aliases={"file_path": "path"},
    hidden={"reads"},
    required=["path"],
)
async def read_file(
    run: RunContext,
    path: PathArg = "",
    offset: Annotated[int, Field(ge=1, description="first line to show")] = 1,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE_LINES)] = MAX_PAGE_LINES,
    reads: Annotated[list[ReadEntry], entries_field("several files at once")] = [],  # noqa: B006
) -> ToolResult:
    """Read a file: numbered lines, paged. PDF, Office, OpenDocument, RTF and EPUB come as
    Markdown; PNG, JPEG, GIF and WebP as images. Read a file before you change it."""
    if single_or_batch(path, reads, "reads"):
        return await _read_each(run, [ReadEntry.model_validate(r) for r in reads])
    resolved = judged_path(run, "read_file", path)
    result, digest = await _read_one(run, resolved, offset, limit)
    run.state.file_hashes[str(resolved)] = digest
    await remember_read(run, resolved, result.text)  # outside the workspace: not to be sent on
    return result


async def _read_each(run: RunContext, entries: list[ReadEntry]) -> ToolResult:
    """Each file's page in turn, within one page's characters (and MAX_BATCH_IMAGES images) in
    all: a file that no longer fits is not shown (nor recorded as read), and says so."""
    resolve = EntryPaths(run, "read_file")
    images: list[Image] = []
    untrusted = False
    room = MAX_PAGE_CHARS

    async def one(entry: ReadEntry) -> Outcome:
        nonlocal room, untrusted
        resolved = resolve(entry.path)
        shown = shown_path(run, resolved)
        result, digest = await _read_one(run, resolved, entry.offset, entry.limit)
        if len(result.text) > room:
            raise ToolError(
                f"not shown: its {len(result.text)} characters do not fit in this answer; "
                "read it in a call of its own"
            )
        if result.images and len(images) >= MAX_BATCH_IMAGES:
            raise ToolError(
                f"not shown: one call shows at most {MAX_BATCH_IMAGES} images; "
                "read it in another call"
            )
        room -= len(result.text)
        run.state.file_hashes[str(resolved)] = digest
        await remember_read(run, resolved, result.text)
        images.extend(result.images)
        untrusted = untrusted or result.untrusted
        return Outcome(shown, result.text)

    outcomes = await run_each(entries, one)
    return ToolResult(report("files read", outcomes), images=images, untrusted=untrusted)


# ---- write_file, edit_file --------------------------------------------------------------------


def _write_checked(
    fence: Fence, hashes: dict[str, str], path: Path, shown: str, data: bytes
) -> bool:
    """Write after the read-and-unchanged check; True when a file was replaced."""
    fence.refuse_writing(path, shown)
    current = existing_bytes(fence, path, shown)
    if current is not None:
        check_read_and_unchanged(hashes, path, shown, current)
    write_atomically(path, data, shown)
    return current is not None


async def _write_one(run: RunContext, resolved: Path, content: str) -> str:
    shown = shown_path(run, resolved)
    data = content.encode("utf-8")
    await asyncio.to_thread(budget.check_write, run, resolved, len(data))
    replaced = await asyncio.to_thread(
        _write_checked, Fence.for_run(run), run.state.file_hashes, resolved, shown, data
    )
    run.state.file_hashes[str(resolved)] = sha256_of(data)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return f"{'Replaced' if replaced else 'Created'} {shown}: {lines} lines, {len(data)} bytes"


@tool(
    edits_files=True, aliases={"file_path": "path"}, hidden={"files"}, required=["path", "content"]
)
async def write_file(
    run: RunContext,
    path: PathArg = "",
    content: str | None = None,
    files: Annotated[list[WriteEntry], entries_field("several files at once")] = [],  # noqa: B006
) -> str:
    """Write a whole file (folders created). Replacing a file needs a read_file of it first;
    for small changes use edit_file."""
    if single_or_batch(path, files, "files"):
        entries = [WriteEntry.model_validate(f) for f in files]
        refuse_repeats(entries, "files")
        resolve = EntryPaths(run, "write_file")

        async def one(entry: WriteEntry) -> Outcome:
            resolved = resolve(entry.path)
            return Outcome(
                shown_path(run, resolved), await _write_one(run, resolved, entry.content)
            )

        return report("files written", await run_each(entries, one))
    if content is None:
        raise ToolError("content is required: the whole text of the file")
    return await _write_one(run, judged_path(run, "write_file", path), content)


def _replaced(text: str, change: tuple[str, str, bool], shown: str) -> tuple[str, int]:
    """`text` after one edit (old, new, replace_all), and how many replacements it made."""
    old, new, replace_all = change
    old, new = in_line_endings_of(text, old, new)
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string not found in {shown}; it must match exactly, indentation included "
            "(read the file again to copy it)"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string appears {count} times in {shown} (at lines {line_numbers(text, old)}); "
            "add surrounding lines to make it unique, or set replace_all=true"
        )
    return (text.replace(old, new) if replace_all else text.replace(old, new, 1)), count


def _edit(
    fence: Fence,
    hashes: dict[str, str],
    path: Path,
    shown: str,
    changes: list[tuple[str, str, bool]],
) -> tuple[str, str, int, str]:
    """Apply the edits in order, all or none, in one write; returns text before, text after,
    replacements, sha256 of the new bytes."""
    fence.refuse_writing(path, shown)
    raw = existing_bytes(fence, path, shown)
    if raw is None:
        raise ToolError(f"{shown}: no such file; create it with write_file")
    check_read_and_unchanged(hashes, path, shown, raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (byte {exc.start}); edit_file edits text only"
        ) from None
    after, total = text, 0
    for number, change in enumerate(changes, 1):
        try:
            after, count = _replaced(after, change, shown)
        except ToolError as exc:
            if len(changes) == 1:
                raise
            raise ToolError(
                f"edit {number} of {len(changes)}: {exc}; the file is unchanged"
            ) from None
        total += count
    data = after.encode("utf-8")
    write_atomically(path, data, shown)
    return text, after, total, sha256_of(data)


async def _edit_one(run: RunContext, resolved: Path, changes: list[tuple[str, str, bool]]) -> str:
    shown = shown_path(run, resolved)
    if any(not old for old, _, _ in changes):
        raise ToolError("old_string is empty; to create or replace a whole file use write_file")
    real = [c for c in changes if c[0] != c[1]]
    if not real:  # a no-op, said as such: nothing is read or written
        return f"{shown} unchanged: old_string and new_string are the same, so there is no edit"
    growth = sum(len(new) - len(old) for old, new, _ in real)
    await asyncio.to_thread(budget.check_write, run, resolved, growth)
    before, after, count, digest = await asyncio.to_thread(
        _edit, Fence.for_run(run), run.state.file_hashes, resolved, shown, real
    )
    run.state.file_hashes[str(resolved)] = digest
    plural = "s" if count > 1 else ""
    return f"Edited {shown} ({count} replacement{plural}):\n{diff_of(before, after, shown)}"


@tool(
    edits_files=True,
    aliases={"file_path": "path"},
    hidden={"edits"},
    required=["path", "old_string", "new_string"],
)
async def edit_file(
    run: RunContext,
    path: PathArg = "",
    old_string: Annotated[
        str, Field(description="exact text to replace, indentation included")
    ] = "",
    new_string: str | None = None,
    replace_all: Annotated[bool, Field(description="replace every occurrence")] = False,
    edits: Annotated[list[EditEntry], entries_field("several edits, in order")] = [],  # noqa: B006
) -> str:
    """Replace old_string with new_string in a file read before; answers with the diff.
    old_string must occur once unless replace_all."""
    if single_or_batch(path, edits, "edits"):
        entries = [EditEntry.model_validate({**e, "path": e.get("path") or path}) for e in edits]
        if any(not entry.path for entry in entries):
            raise ToolError("each of edits needs its path (or give the call's path for all)")
        # File by file: each file's edits apply in order, all or none, in one write.
        groups = {id(group[0]): group for group in per_file(entries).values()}

        async def one(first: EditEntry) -> Outcome:
            resolved = judged_path(run, "edit_file", first.path)
            changes = [(e.old_string, e.new_string, e.replace_all) for e in groups[id(first)]]
            return Outcome(shown_path(run, resolved), await _edit_one(run, resolved, changes))

        firsts = [group[0] for group in groups.values()]
        return report("files edited", await run_each(firsts, one))
    if new_string is None:
        raise ToolError("new_string is required (an empty string deletes old_string)")
    change = (old_string, new_string, replace_all)
    return await _edit_one(run, judged_path(run, "edit_file", path), [change])


__all__ = ["FILE_TOOLS", "NEW_FILE_MODE", "edit_file", "find_files", "read_file", "write_file"]

FILE_TOOLS: list[Tool] = [read_file, write_file, edit_file, find_files]
