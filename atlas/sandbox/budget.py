"""A workspace's size budget (`[sandbox] workspace_max_mb`, docs/sandbox.md "Limits").

No filesystem quota is assumed, so the budget holds this far: a file tool's write that would
take the workspace past it fails with a clear error; one file a command writes cannot exceed it
(RLIMIT_FSIZE, limits.py); after each foreground command the workspace is measured and, while it
is over, the command's result says so and file-tool writes are refused. Commands still run while
it is over (so that the bot can delete what it wrote), and a command can exceed the budget with
many files until its end: the disk holds it, not the budget.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import ToolError

if TYPE_CHECKING:
    from atlas.tools.registry import RunContext

MB = 1024 * 1024
FRESH_SECONDS = 2.0  # a measure this recent is reused (a batch of writes walks the tree once)
_measured: dict[Path, tuple[float, int]] = {}


def usage(folder: Path) -> int:
    """Bytes on disk under `folder` (allocated blocks; links not followed)."""
    total = 0
    stack = [folder]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # removed meanwhile, or unreadable: not the bot's to fill
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return total


def _used(workspace: Path, *, fresh: bool = False) -> int:
    seen = _measured.get(workspace)
    if fresh or seen is None or time.monotonic() - seen[0] > FRESH_SECONDS:
        seen = (time.monotonic(), usage(workspace))
        _measured[workspace] = seen
    return seen[1]


def _message(workspace: Path, used: int, limit_mb: int) -> str:
    return (
        f"the workspace {workspace} is over its size budget: {used / MB:.1f} MB used of "
        f"[sandbox] workspace_max_mb = {limit_mb} MB; delete files there (a command can) or "
        "ask the person to raise the budget in config.toml"
    )


def check_write(run: RunContext, path: Path, adding: int) -> None:
    """Refuse a file-tool write of `adding` bytes into the workspace past its budget."""
    workspace = run.bot.workspace.resolve()
    if workspace not in path.parents:
        return  # only the workspace has a budget
    limit_mb = run.home.settings.sandbox.workspace_max_mb
    used = _used(workspace)
    if used + max(adding, 0) > limit_mb * MB:
        raise ToolError(_message(workspace, used + max(adding, 0), limit_mb))
    _measured[workspace] = (_measured[workspace][0], used + max(adding, 0))


def note_after_command(run: RunContext) -> str:
    """What a command's result adds when the workspace is now over its budget ("" if not)."""
    workspace = run.bot.workspace.resolve()
    limit_mb = run.home.settings.sandbox.workspace_max_mb
    used = _used(workspace, fresh=True)
    return f"\n[{_message(workspace, used, limit_mb)}]" if used > limit_mb * MB else ""
