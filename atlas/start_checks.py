"""What `atlas run` checks before it starts anything, and `atlas doctor` reports the same way.

Each check raises an AtlasError that names the file, the key (and line) or what is damaged, so
a mistake stops the daemon at once instead of a half-working start that reports ready.
"""

from __future__ import annotations

from atlas.config import find_line, read_toml
from atlas.errors import ConfigError
from atlas.home import Bot, Home
from atlas.store.integrity import check_home

MCP_PREFIX = "mcp__"


def check_databases(home: Home) -> None:
    """atlas.db and every bot's conversations.db, before any is opened (so no file is created
    or changed on the way out): a home Atlas cannot write, a file it cannot read, a garbage or
    truncated file, damage inside (quick_check, within a budget; atlas/store/integrity.py)."""
    check_home(home)


def known_tool_names() -> list[str]:
    from atlas.tools.catalog import default_registry  # late: imports every tool

    return sorted(tool.name for tool in default_registry())


def check_tool_names(bot: Bot, known: list[str] | None = None) -> None:
    """A bot.toml's `tools` list names only built-in tools (a bot's MCP tools come with the
    servers its `mcp_servers` names, whatever this list says)."""
    wanted = bot.settings.tools or []
    known = known if known is not None else known_tool_names()
    unknown = [name for name in wanted if name not in known]
    if not unknown:
        return
    path = bot.root / "bot.toml"
    _, text = read_toml(path)
    line = find_line(text, ("tools",))
    where = f" (line {line})" if line else ""
    hint = ""
    if any(name.startswith(MCP_PREFIX) for name in unknown):
        hint = "; MCP tools are not listed here: a bot gets them with the servers in mcp_servers"
    raise ConfigError(
        f"{path}: tools{where}: unknown tool name(s) {', '.join(map(repr, unknown))}{hint}; "
        f"known: {', '.join(known)}"
    )


def check_before_start(home: Home) -> None:
    """Everything a daemon needs right before it starts; the first problem is raised. A
    `[store] url` was checked when the settings loaded (a postgresql:// address, no password
    in it); the server is reached when the daemon opens the home's engines, first thing
    (atlas/store/home_engines.py), and an unreachable one stops it there."""
    from atlas.channels.settings import check_channels  # late: channels import the runtime

    check_databases(home)
    known = known_tool_names()
    for bot in home.bots.values():
        check_tool_names(bot, known)
        check_channels(bot)


def check_before_chat(home: Home) -> None:
    """What `atlas chat` refuses, in the words `atlas run` and `atlas doctor` use: the
    databases, and every bot's `tools` list (a bot's turn may reach the others)."""
    check_databases(home)
    known = known_tool_names()
    for bot in home.bots.values():
        check_tool_names(bot, known)
