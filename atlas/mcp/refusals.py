"""A server's failure in Atlas's words when the sandbox's proxy refused what it asked for: the
host, why, and the setting that lets it through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atlas.mcp.config import McpServer


def explain_refusals(server: McpServer, refusals: Sequence[tuple[str, int, str]]) -> str:
    """One line per refused host (the first reason for each), with the fix."""
    seen: dict[str, tuple[int, str]] = {}
    for host, port, reason in refusals:
        seen.setdefault(host, (port, reason))
    lines = []
    for host, (port, reason) in seen.items():
        if "not on the sandbox's allowed domains" in reason:
            fix = (
                f'to let this server reach it, add "{host}" to "allowed_domains" on server '
                f"{server.name!r} in {server.source} (or to [sandbox] allowed_domains in "
                "config.toml, for every command)"
            )
        else:
            fix = "(the address fence, not the allow-list, refused it)"
        lines.append(f"the sandbox's proxy refused {host}:{port}: {reason}; {fix}")
    return "\n  ".join(lines)
