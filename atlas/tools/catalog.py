"""Every built-in tool, in the one fixed order the model sees them."""

from __future__ import annotations

from atlas.tools.registry import ToolRegistry


def default_registry() -> ToolRegistry:
    from atlas.tools.browser import BROWSER_TOOLS
    from atlas.tools.conversations import CONVERSATION_TOOLS
    from atlas.tools.files import FILE_TOOLS
    from atlas.tools.memory import MEMORY_TOOLS
    from atlas.tools.plan import PLAN_TOOLS
    from atlas.tools.shell import SHELL_TOOLS
    from atlas.tools.skills import SKILL_TOOLS
    from atlas.tools.web import WEB_TOOLS

    return ToolRegistry(
        [
            *FILE_TOOLS,
            *SHELL_TOOLS,
            *WEB_TOOLS,
            *MEMORY_TOOLS,
            *SKILL_TOOLS,
            *PLAN_TOOLS,
            *CONVERSATION_TOOLS,
            *BROWSER_TOOLS,
        ]
    )
