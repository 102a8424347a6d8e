"""Every built-in tool, in the one fixed order the model sees them.

Always-on tools come first; deferred ones (sent only once loaded, after the others) follow.
"""

from __future__ import annotations

from atlas.tools.registry import ToolRegistry


def default_registry() -> ToolRegistry:
    from atlas.tools.agents import AGENT_TOOLS
    from atlas.tools.ask import ASK_TOOLS
    from atlas.tools.attach import ATTACH_TOOLS
    from atlas.tools.browser import BROWSER_TOOLS
    from atlas.tools.conversations import CONVERSATION_TOOLS
    from atlas.tools.delegate import DELEGATE_TOOLS
    from atlas.tools.files import FILE_TOOLS
    from atlas.tools.memory import MEMORY_TOOLS
    from atlas.tools.plan import PLAN_TOOLS
    from atlas.tools.routines import ROUTINE_TOOLS
    from atlas.tools.shell import SHELL_TOOLS
    from atlas.tools.skills import SKILL_TOOLS
    from atlas.tools.tool_search import TOOL_SEARCH_TOOLS
    from atlas.tools.web import WEB_TOOLS

    return ToolRegistry(
        [
            *FILE_TOOLS,
            *SHELL_TOOLS,
            *ATTACH_TOOLS,
            *WEB_TOOLS,
            *MEMORY_TOOLS,
            *SKILL_TOOLS,
            *ASK_TOOLS,
            *DELEGATE_TOOLS,
            *AGENT_TOOLS,
            *TOOL_SEARCH_TOOLS,
            *PLAN_TOOLS,
            *CONVERSATION_TOOLS,
            *ROUTINE_TOOLS,
            *BROWSER_TOOLS,
        ]
    )
