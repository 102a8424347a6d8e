"""The crash test's full-disk fault (`crash_test.py --disk-full SECONDS`, issue 34).

The home lives on a tmpfs of its own, `size_mb` big (mounted as root; the machine's disk is
never filled). Once during the run, between two kills, a filler file takes every free byte of
it for `seconds`, then is deleted: every SQLite write of the daemon meanwhile fails with
"database or disk is full" (SQLITE_FULL) as soon as it needs a new block. The crash test's own
checks then say whether that lost, repeated or stalled anything.

    with HomeOnTmpfs(home, size_mb=128) as disk:
        ...
        await disk.full_for(8.0)  # fills, holds, frees
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

FILLER = ".disk-filler"
CHUNKS = (1 << 20, 1 << 12, 1 << 9)  # big writes first, then what is left of the last blocks


@dataclass
class HomeOnTmpfs:
    home: Path
    size_mb: int
    filled_at: list[float] = field(default_factory=list)  # monotonic, when each fill began
    freed_at: list[float] = field(default_factory=list)
    filled_bytes: int = 0

    def __enter__(self) -> HomeOnTmpfs:
        self.home.mkdir(parents=True, exist_ok=True)
        mount = ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.home)]
        done = subprocess.run(mount, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(
                f"--disk-full needs a tmpfs for the home (run as root): `{' '.join(mount)}` "
                f"failed: {done.stderr.strip()}"
            )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        subprocess.run(["umount", "-l", str(self.home)], check=False)

    def fill(self) -> int:
        """Take every free byte of the home's tmpfs; the bytes written."""
        written = 0
        with (self.home / FILLER).open("ab", buffering=0) as filler:
            for size in CHUNKS:
                block = b"\0" * size
                while True:
                    try:
                        written += filler.write(block) or 0
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def free(self) -> None:
        (self.home / FILLER).unlink(missing_ok=True)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.home)
        return stat.f_bavail * stat.f_frsize

    async def full_for(self, seconds: float) -> None:
        """Fill the disk, keep it full `seconds` (filling again what the daemon freed, a
        checkpoint truncating its WAL), then free it."""
        loop = asyncio.get_running_loop()
        self.filled_at.append(loop.time())
        try:
            self.filled_bytes += await asyncio.to_thread(self.fill)
            deadline = loop.time() + seconds
            while loop.time() < deadline:
                await asyncio.sleep(0.2)
                if await asyncio.to_thread(self.free_bytes):
                    self.filled_bytes += await asyncio.to_thread(self.fill)
        finally:
            await asyncio.to_thread(self.free)
            self.freed_at.append(loop.time())
