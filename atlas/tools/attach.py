"""`attach_file`: send a file with the reply (a report, a chart, a screenshot)."""

from __future__ import annotations

import asyncio

from atlas.errors import ToolError
from atlas.tools.paths import PathArg, resolve_path, shown_path
from atlas.tools.registry import RunContext, ToolResult, only_for, tool

MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024  # Telegram's bot upload limit; Slack allows more


@tool(available=only_for("conversation"), aliases={"file_path": "path"})
async def attach_file(run: RunContext, path: PathArg) -> ToolResult:
    """Attach a file to your reply: the user receives it with your answer."""
    resolved = resolve_path(run, path)
    shown = shown_path(run, resolved)
    if not await asyncio.to_thread(resolved.is_file):
        raise ToolError(f"{shown} is not a file")
    size = (await asyncio.to_thread(resolved.stat)).st_size
    if size > MAX_ATTACHMENT_BYTES:
        raise ToolError(f"{shown} is {size / 1e6:.1f} MB; attachments are limited to 50 MB")
    return ToolResult(f"{shown} will be sent with your reply.", files=[resolved])


ATTACH_TOOLS = [attach_file]
