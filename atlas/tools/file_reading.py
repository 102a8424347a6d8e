"""Reading a file for read_file without waiting forever or holding it whole.

`blocking_reason` refuses, by stat and before any open, what could block or act when opened;
`decoded_lines` reads a file line by line with bounded memory, however long its lines.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

MAX_LINE_CHARS = 2000
# A line is read this many bytes at most at once (a UTF-8 character is up to 4 bytes); the
# rest of a longer line is hashed and counted in READ_CHUNK pieces, never held whole.
MAX_LINE_BYTES = MAX_LINE_CHARS * 4 + 4
READ_CHUNK = 1 << 20
# Regular files by stat that block on read: the kernel's log stream and ftrace's pipes.
BLOCKING_KERNEL_FILES = frozenset({"/proc/kmsg"})
BLOCKING_KERNEL_NAMES = frozenset({"trace_pipe", "trace_pipe_raw"})


def blocking_reason(path: Path, shown: str) -> str | None:
    """Why a path must not even be opened: opening a device may act (a tape rewinds, a
    terminal is taken), and a FIFO, a socket or a kernel stream like /proc/kmsg waits for data
    that may never come (and /proc/kmsg hands each message to one reader only: reading it would
    take the kernel's log from the system's own logger). Checked with stat, before any open."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # the open reports it (no such file, permission)
    kinds = (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    for is_kind, kind in kinds:
        if is_kind(st.st_mode):
            return f"{shown} is not a regular file but {kind}: reading it could wait forever"
    on_sysfs = str(path).startswith("/sys/")
    if str(path) in BLOCKING_KERNEL_FILES or (on_sysfs and path.name in BLOCKING_KERNEL_NAMES):
        return (
            f"{shown} is a kernel stream that waits for new data (and consumes it): "
            "read_file does not read it; `dmesg` shows the kernel's log"
        )
    return None


def cut_line(line: str, more: int = 0) -> str:
    """A line of at most MAX_LINE_CHARS, saying how many characters were left out (`more`:
    those beyond `line` that the reader already skipped)."""
    more += max(0, len(line) - MAX_LINE_CHARS)
    if not more:
        return line
    return f"{line[:MAX_LINE_CHARS]}… [line cut: {more} more characters]"


def _decode(raw: bytes, number: int, invalid: list[int]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if not invalid or invalid[-1] != number:
            invalid.append(number)
        return raw.decode("utf-8", errors="replace")


def _rest_of_line(
    f: BinaryIO, digest: hashlib._Hash, number: int, invalid: list[int], pending: bytes
) -> int:
    """Hash and count (in characters) what is left of a long line, READ_CHUNK bytes at a time,
    without holding it; `pending`: its first bytes, already read and hashed."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")

    def decode(raw: bytes, final: bool) -> str:
        nonlocal decoder
        try:
            return decoder.decode(raw, final)
        except UnicodeDecodeError:
            if not invalid or invalid[-1] != number:
                invalid.append(number)
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            return decoder.decode(raw, final)

    chars = len(decode(pending, False))
    while raw := f.readline(READ_CHUNK):
        digest.update(raw)
        if raw.endswith(b"\n"):
            return chars + len(decode(raw, True).removesuffix("\n").removesuffix("\r"))
        chars += len(decode(raw, False))
    return chars + len(decode(b"", True))


def decoded_lines(f: BinaryIO, digest: hashlib._Hash, invalid: list[int]) -> Iterator[str]:
    """The file's lines, each cut to MAX_LINE_CHARS, read MAX_LINE_BYTES at most at once: a
    one-line file of 200 MB is paged in a few megabytes (docs/benchmarks.md)."""
    number = 0
    while raw := f.readline(MAX_LINE_BYTES):
        number += 1
        digest.update(raw)
        if raw.endswith(b"\n") or len(raw) < MAX_LINE_BYTES:
            yield cut_line(_decode(raw, number, invalid).removesuffix("\n").removesuffix("\r"))
            continue
        # A long line: its start up to a whole character, the rest only counted.
        keep = len(raw)
        while keep > len(raw) - 4 and raw[keep - 1] & 0xC0 == 0x80:
            keep -= 1  # continuation bytes of a character cut by the read
        if keep > 0 and raw[keep - 1] >= 0xC0:
            keep -= 1  # the lead byte of that character
        head = _decode(raw[:keep], number, invalid)
        more = _rest_of_line(f, digest, number, invalid, raw[keep:])
        yield cut_line(head, more)
