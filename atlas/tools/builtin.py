"""Every built-in tool, in the one fixed order the model sees them (atlas/tools/catalog.py
makes the registry).

tool_search is handed in rather than imported: it searches these very tools when no
dispatcher runs (a test, `atlas budget`), so its module uses this one, and importing it here
would close an import circle.
"""

from __future__ import annotations

from collections.abc import Sequence

from atlas.tools.registry import Tool


def builtin_tools(tool_search: Sequence[Tool]) -> list[Tool]:
    """Always-on tools first; deferred ones (sent only once loaded) are marked as such."""
    from atlas.tools.agents import AGENT_TOOLS
    from atlas.tools.ask import ASK_TOOLS
    from atlas.tools.ask_parent import ASK_PARENT_TOOLS
    from atlas.tools.attach import ATTACH_TOOLS
    from atlas.tools.browser import BROWSER_TOOLS
    from atlas.tools.conversations import CONVERSATION_TOOLS
    from atlas.tools.delegate import DELEGATE_TOOLS
    from atlas.tools.delegation_search import DELEGATION_TOOLS
    from atlas.tools.executors import EXECUTOR_TOOLS
    from atlas.tools.files import FILE_TOOLS
    from atlas.tools.memory import MEMORY_TOOLS
    from atlas.tools.plan import PLAN_TOOLS
    from atlas.tools.routines import ROUTINE_TOOLS
    from atlas.tools.shell import SHELL_TOOLS
    from atlas.tools.skills import SKILL_TOOLS
    from atlas.tools.web import WEB_TOOLS

    return [
        *FILE_TOOLS,
        *SHELL_TOOLS,
        *ATTACH_TOOLS,
        *WEB_TOOLS,
        *MEMORY_TOOLS,
        *SKILL_TOOLS,
        *ASK_TOOLS,
        *ASK_PARENT_TOOLS,
        *DELEGATE_TOOLS,
        *AGENT_TOOLS,
        *tool_search,
        *PLAN_TOOLS,
        *CONVERSATION_TOOLS,
        *ROUTINE_TOOLS,
        *BROWSER_TOOLS,
        *EXECUTOR_TOOLS,
        *DELEGATION_TOOLS,
    ]
