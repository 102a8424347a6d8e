"""The registry of every built-in tool, in the one fixed order the model sees them
(atlas/tools/builtin.py lists them).

Always-on tools come first; deferred ones (sent only once loaded, after the others) follow.
"""

from __future__ import annotations

from atlas.tools.builtin import builtin_tools
from atlas.tools.registry import ToolRegistry
from atlas.tools.tool_search import TOOL_SEARCH_TOOLS


def default_registry() -> ToolRegistry:
    return ToolRegistry(builtin_tools(TOOL_SEARCH_TOOLS))
