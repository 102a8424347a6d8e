"""Files people send: saved into the bot's `workspace/inbox/` and named in the turn's text, so
the model can `read_file` them (documents as Markdown, images as images)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path

from atlas.errors import AtlasError
from atlas.home import Bot

INBOX = "inbox"


class FileTooLarge(AtlasError):
    """A file over the channel's inbox size limit."""


def _safe_name(name: str) -> str:
    """A file name that cannot leave the inbox or surprise a shell."""
    base = Path(name.replace("\\", "/")).name
    base = re.sub(r"[^\w.\-]+", "_", base).strip("._") or "file"
    stem, dot, suffix = base.rpartition(".")
    if dot and len(suffix) <= 10:
        return f"{stem[:80] or 'file'}.{suffix}"
    return base[:90]


def inbox_dir(bot: Bot) -> Path:
    return bot.workspace / INBOX


def inbox_path(bot: Bot, name: str) -> Path:
    """A fresh path in the bot's inbox for `name`: never overwrites an earlier file."""
    folder = inbox_dir(bot)
    folder.mkdir(parents=True, exist_ok=True)
    safe = _safe_name(name)
    path = folder / safe
    if not path.exists():
        return path
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    stem, dot, suffix = safe.rpartition(".")
    stem, suffix = (stem, f".{suffix}") if dot else (safe, "")
    for number in range(1, 1000):
        path = folder / f"{stem}-{stamp}-{number}{suffix}"
        if not path.exists():
            return path
    raise AtlasError(f"{folder}: too many files named like {safe!r}")


def check_size(size: int | None, limit: int, name: str) -> None:
    """Refuse a file the platform says is over the limit, before downloading it."""
    if size is not None and size > limit:
        raise FileTooLarge(
            f"{name} is {size / 1_048_576:.1f} MB; this bot accepts files up to "
            f"{limit / 1_048_576:.0f} MB"
        )


async def save_stream(bot: Bot, name: str, chunks: AsyncIterator[bytes], limit: int) -> Path:
    """Write a download into the inbox, stopping (and removing it) past `limit` bytes."""
    path = inbox_path(bot, name)
    written = 0
    try:
        with path.open("wb") as out:
            async for chunk in chunks:
                written += len(chunk)
                if written > limit:
                    raise FileTooLarge(
                        f"{name} is over {limit / 1_048_576:.0f} MB, this bot's file size limit"
                    )
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def save_bytes(bot: Bot, name: str, data: bytes, limit: int) -> Path:
    check_size(len(data), limit, name)
    path = inbox_path(bot, name)
    path.write_bytes(data)
    return path


def name_files(text: str, files: Iterable[Path], workspace: Path) -> str:
    """The turn's text with each file named as the model's tools see it: `[file: inbox/x.pdf]`."""
    lines = [text] if text else []
    for path in files:
        try:
            shown = path.relative_to(workspace).as_posix()
        except ValueError:
            shown = str(path)
        lines.append(f"[file: {shown}]")
    return "\n".join(lines)


__all__ = [
    "FileTooLarge",
    "check_size",
    "inbox_dir",
    "inbox_path",
    "name_files",
    "save_bytes",
    "save_stream",
]
