"""How write_file and edit_file change a file: atomically, and only a file read unchanged;
and edit_file's matching in the file's own line endings, and its diff.

The SHA-256 of a file's bytes is recorded when read_file reads it; a change is refused unless
the file on disk still has that hash. The write goes to a temporary file in the same folder and
is renamed over the target, inside a folder opened once without following links.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import secrets
import stat
from pathlib import Path

from atlas.errors import ToolError
from atlas.tools.fences import Fence, PathChanged, open_folder

MAX_DIFF_LINES = 300


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def write_atomically(path: Path, data: bytes, shown: str) -> None:
    """Temp file in the same folder, then a rename: a reader never sees half a file. The folder
    is opened once, without following a symlink, and both happen inside it (no second lookup)."""
    try:
        folder = open_folder(path.parent, create=True)
    except ToolError:
        raise
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror} ({path.parent})") from None
    tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        try:
            existing = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            mode = NEW_FILE_MODE
        else:
            if stat.S_ISLNK(existing.st_mode):
                raise PathChanged(
                    f"{shown} became a symbolic link after its check; nothing written"
                )
            mode = stat.S_IMODE(existing.st_mode)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
    finally:
        os.close(folder)


def check_read_and_unchanged(
    hashes: dict[str, str], path: Path, shown: str, current: bytes
) -> None:
    known = hashes.get(str(path))
    if known is None:
        raise ToolError(
            f"{shown} exists but was not read in this conversation; read it first (read_file)"
        )
    if known != sha256_of(current):
        raise ToolError(f"{shown} changed since you read it; read it again before changing it")


def existing_bytes(fence: Fence, path: Path, shown: str) -> bytes | None:
    """The file's bytes, None when there is none. Writing where the bot cannot see happens only
    once a person allowed it (the gate asks every time); a file already there is then not
    replaced, since the bot could not have read it."""
    if not fence.view.sees(path):
        if os.path.lexists(path):
            raise ToolError(
                f"{shown} is outside what this bot can see: file tools cannot read it, so they "
                "do not replace or edit it"
            )
        return None
    try:
        f, _ = fence.open_file(path, shown)
    except FileNotFoundError:
        return None
    with f:
        return f.read()


# ---- edit_file's text --------------------------------------------------------------------------


def in_line_endings_of(text: str, *strings: str) -> list[str]:
    """The strings in the file's own line endings, when the file has one style (CRLF or LF)."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    if crlf and not lf:
        return [s.replace("\r\n", "\n").replace("\n", "\r\n") for s in strings]
    if lf and not crlf:
        return [s.replace("\r\n", "\n") for s in strings]
    return list(strings)  # no line breaks, or mixed: take the strings as they are


def line_numbers(text: str, needle: str, most: int = 10) -> str:
    numbers, start = [], 0
    while len(numbers) < most and (pos := text.find(needle, start)) >= 0:
        numbers.append(str(text.count("\n", 0, pos) + 1))
        start = pos + len(needle)
    return ", ".join(numbers)


def diff_of(before: str, after: str, shown: str) -> str:
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
