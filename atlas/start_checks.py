"""What `atlas run` checks before it starts anything, and `atlas doctor` reports the same way.

Each check raises an AtlasError that names the file, the key (and line) or what is damaged, so
a mistake stops the daemon at once instead of a half-working start that reports ready.
"""

from __future__ import annotations

from atlas.config import find_line, read_toml
from atlas.errors import ConfigError
from atlas.home import Bot, Home
from atlas.store.damage import check_database_file

# Tools a server adds once connected: their names are not known before the daemon starts.
MCP_PREFIX = "mcp__"


def check_databases(home: Home) -> None:
    """atlas.db and every bot's conversations.db: a garbage or truncated file is refused
    before any database is opened, so no file is created or changed on the way out."""
    for path in (home.db_path, *(bot.db_path for bot in home.bots.values())):
        check_database_file(path)


def known_tool_names() -> list[str]:
    from atlas.tools.catalog import default_registry  # late: imports every tool

    return sorted(tool.name for tool in default_registry())


def check_tool_names(bot: Bot, known: list[str] | None = None) -> None:
    """A bot.toml's `tools` list names only tools that exist (MCP tools, mcp__server__tool,
    exist once their server connects and are not checked here)."""
    wanted = bot.settings.tools or []
    known = known if known is not None else known_tool_names()
    unknown = [name for name in wanted if name not in known and not name.startswith(MCP_PREFIX)]
    if not unknown:
        return
    path = bot.root / "bot.toml"
    _, text = read_toml(path)
    line = find_line(text, ("tools",))
    where = f" (line {line})" if line else ""
    raise ConfigError(
        f"{path}: tools{where}: unknown tool name(s) {', '.join(map(repr, unknown))}; "
        f"known: {', '.join(known)} (and mcp__<server>__<tool> for MCP servers)"
    )


def check_before_start(home: Home) -> None:
    """Everything a daemon needs right before it starts; the first problem is raised."""
    from atlas.channels.settings import check_channels  # late: channels import the runtime

    check_databases(home)
    known = known_tool_names()
    for bot in home.bots.values():
        check_tool_names(bot, known)
        check_channels(bot)
