"""`attach_file`: send a file with the reply (a report, a chart, a screenshot).

It follows read_file's path rules (the gate judges its path the same way), and what is sent is
what was checked: the file is opened once (no symlink followed, no hard link into a fenced
folder) and copied from that open file into the conversation's spill folder, which the channel
then uploads. A link swapped in after the check cannot change what goes out.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from pathlib import Path

from atlas.errors import ToolError
from atlas.tools.fences import Fence
from atlas.tools.paths import PathArg, judged_path, shown_path
from atlas.tools.registry import RunContext, ToolResult, only_for, tool

MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024  # Telegram's bot upload limit; Slack allows more


def _checked_copy(fence: Fence, path: Path, shown: str, folder: Path) -> Path:
    """Copy the file, opened once and checked, into `folder`; the copy keeps the file's name."""
    try:
        f, st = fence.open_file(path, shown)
    except FileNotFoundError:
        raise ToolError(f"{shown} is not a file") from None
    with f:
        if st.st_size > MAX_ATTACHMENT_BYTES:
            raise ToolError(
                f"{shown} is {st.st_size / 1e6:.1f} MB; attachments are limited to 50 MB"
            )
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / path.name
        with copy.open("wb") as out:
            shutil.copyfileobj(f, out, 1 << 20)
    return copy


@tool(available=only_for("conversation"), aliases={"file_path": "path"})
async def attach_file(run: RunContext, path: PathArg) -> ToolResult:
    """Attach a file to your reply: the user receives it with your answer."""
    resolved = judged_path(run, "attach_file", path)
    shown = shown_path(run, resolved)
    folder = (
        run.home.spill_dir
        / run.bot.name
        / str(run.conversation_id)
        / "attachments"
        / secrets.token_hex(6)
    )
    copy = await asyncio.to_thread(_checked_copy, Fence.for_run(run), resolved, shown, folder)
    return ToolResult(f"{shown} will be sent with your reply.", files=[copy])


ATTACH_TOOLS = [attach_file]
