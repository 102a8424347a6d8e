"""Oversized tool results go whole to a spill file; the model gets the head, the tail and
where to read the rest, so nothing is lost and the context stays bounded."""

from __future__ import annotations

from pathlib import Path


def spill(text: str, limit: int, path: Path) -> str:
    """Return `text` itself when it fits, else head + pointer + tail, writing the whole to `path`."""
    if len(text) <= limit:
        return text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    head_chars, tail_chars = limit // 2, limit // 4
    head = text[:head_chars]
    # Cut at line boundaries so the offsets named below are exact.
    head = head[: head.rfind("\n") + 1] or head
    tail_start = len(text) - tail_chars
    newline = text.find("\n", tail_start)
    tail_start = newline + 1 if newline != -1 else tail_start
    tail = text[tail_start:]
    first_omitted = head.count("\n") + 1
    last_omitted = text.count("\n", 0, tail_start)
    omitted = tail_start - len(head)
    return (
        f"{head}\n[... {omitted:,} characters (lines {first_omitted}-{last_omitted}) omitted. "
        f"The whole result is in {path}: read_file path={str(path)!r} offset={first_omitted} "
        f"to see the rest ...]\n\n{tail}"
    )
