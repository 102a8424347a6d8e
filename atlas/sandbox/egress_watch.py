"""What a caller learns of, and adds to, one channel of the egress proxy (atlas/sandbox/proxy.py).
Light on purpose: the MCP manager imports it at start, the proxy only on first use."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ChannelWatch:
    """A caller's extra hosts for one channel, and what the channel refused (host, port, why):
    an MCP server's launcher registries while it installs, and the cause of its failure."""

    also_allowed: tuple[str, ...] = ()  # patterns as in [sandbox] allowed_domains; may change
    refusals: list[tuple[str, int, str]] = field(default_factory=list)
