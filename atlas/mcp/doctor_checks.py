"""`atlas doctor`'s MCP lines: each server of mcp.json started once, as the daemon would start
it (in the sandbox unless opted out), and its first attempt reported: its tool count, or why it
did not start, in the words the daemon's log uses."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from atlas.errors import AtlasError

if TYPE_CHECKING:
    from atlas.home import Home

CheckLine = tuple[str, bool, str, str]  # name, ok, detail, fix


async def mcp_checks(home: Home) -> list[CheckLine]:
    """One line per server; none without mcp.json. A server that does not start is a failure."""
    from atlas.mcp.config import load_mcp_config, mcp_config_path
    from atlas.mcp.manager import McpManager, McpTimeouts

    try:
        config = load_mcp_config(mcp_config_path(home))
    except AtlasError as exc:
        return [("mcp", False, str(exc), "fix mcp.json")]
    if not config.servers:
        return []
    # One attempt each: the first retry is later than the doctor waits.
    timeouts = dataclasses.replace(McpTimeouts.from_settings(home.settings.mcp), retry_base=3600.0)
    manager = McpManager(home, config=config, timeouts=timeouts)
    try:
        await manager.start(wait=timeouts.connect + 5)
        statuses = manager.status()
    finally:
        await manager.stop()
    lines: list[CheckLine] = []
    for status in statuses:
        if status.state == "ready":
            lines.append((f"mcp {status.name}", True, f"started: {status.tools} tool(s)", ""))
        else:
            why = status.error or f"still {status.state} after {timeouts.connect:.0f} s"
            fix = f"see the message above, and {manager.logs_dir / (status.name + '.log')}"
            lines.append((f"mcp {status.name}", False, f"did not start: {why}", fix))
    return lines
