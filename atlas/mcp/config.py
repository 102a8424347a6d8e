"""The home's mcp.json, in Claude Code's `.mcp.json` format, plus `trust`, `alwaysLoad` and
`sandbox`.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "some-server"], "env": {"TOKEN": "${TOKEN}"}},
        "search": {"type": "http", "url": "https://example.com/mcp",
                   "headers": {"Authorization": "Bearer ${SEARCH_KEY}"},
                   "trust": "untrusted", "alwaysLoad": true},
        "local": {"command": "my-server", "sandbox": false}}}

A stdio server runs in the sandbox unless its entry says `"sandbox": false` (the person's
opt-out). `${VAR}` and `${VAR:-default}` are expanded from the environment when the server is
started, so secrets stay out of the file. The file's structure is checked when it is loaded; a missing
variable is that one server's error, reported when it starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from atlas.errors import ConfigError

if TYPE_CHECKING:
    from atlas.home import Bot, Home

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    trust: Literal["trusted", "untrusted"] = "trusted"
    # Claude Code's spelling in the file; tools of such a server are sent without tool_search.
    always_load: bool = Field(False, alias="alwaysLoad")
    # Set by the loader, not read from the file: for messages that say where.
    name: str = Field("", exclude=True)
    source: str = Field("", exclude=True)

    def _expand(self, value: str, key: str, environ: Mapping[str, str]) -> str:
        def one(match: re.Match[str]) -> str:
            variable, default = match.group(1), match.group(2)
            if variable in environ:
                return environ[variable]
            if default is not None:
                return default
            raise ConfigError(
                f"{self.source}: server {self.name!r}: {key} uses ${{{variable}}}, which is not "
                f"set in the environment (set it, or give a default: ${{{variable}:-value}})"
            )

        return _VARIABLE.sub(one, value)


class StdioServer(_Server):
    """A server Atlas runs as a child process, speaking MCP on its stdin and stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None  # relative to the home folder
    # Runs in the bubblewrap sandbox (atlas/mcp/launch.py); false is the person's opt-out.
    sandbox: StrictBool = True
    # Hosts this server may reach through the proxy besides [sandbox] allowed_domains (sandboxed).
    allowed_domains: list[str] = Field(default_factory=list)

    @field_validator("allowed_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        from atlas.sandbox.proxy_protocol import normalise_pattern

        for pattern in value:
            normalise_pattern(pattern)  # ValueError names the entry
        return value

    def expanded(self, home_root: Path, environ: Mapping[str, str] = os.environ) -> StdioServer:
        """A copy with `${VAR}` expanded and `cwd` made absolute; raises ConfigError."""
        cwd = None
        if self.cwd:
            cwd = str(home_root / Path(self._expand(self.cwd, "cwd", environ)).expanduser())
        return self.model_copy(
            update={
                "command": self._expand(self.command, "command", environ),
                "args": [self._expand(a, f"args[{i}]", environ) for i, a in enumerate(self.args)],
                "env": {k: self._expand(v, f"env.{k}", environ) for k, v in self.env.items()},
                "cwd": cwd,
            }
        )


class HttpServer(_Server):
    """A server reached over streamable HTTP."""

    type: Literal["http"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)

    def expanded(self, home_root: Path, environ: Mapping[str, str] = os.environ) -> HttpServer:
        """A copy with `${VAR}` expanded in the url and headers; raises ConfigError."""
        return self.model_copy(
            update={
                "url": self._expand(self.url, "url", environ),
                "headers": {
                    k: self._expand(v, f"headers.{k}", environ) for k, v in self.headers.items()
                },
            }
        )


McpServer = StdioServer | HttpServer


@dataclass(frozen=True)
class McpConfig:
    """The servers of a home, in the file's order."""

    path: Path
    servers: dict[str, McpServer] = field(default_factory=dict)

    def for_bot(self, bot: Bot) -> list[McpServer]:
        """The servers a bot may use: those its bot.toml names, or all when it names none."""
        names = bot_server_names(bot)
        if not names:
            return list(self.servers.values())
        return [server for name, server in self.servers.items() if name in names]

    def unknown_for_bot(self, bot: Bot) -> list[str]:
        """Names in the bot's mcp_servers that this file does not define."""
        return [name for name in bot_server_names(bot) if name not in self.servers]


def bot_server_names(bot: Bot) -> list[str]:
    """The server names in a bot's `mcp_servers` (a list of names, or a table whose keys are)."""
    named: Any = bot.settings.mcp_servers
    return list(named) if named else []


def bot_may_use(bot: Bot, server: str) -> bool:
    names = bot_server_names(bot)
    return not names or server in names


def mcp_config_path(home: Home) -> Path:
    return home.root / "mcp.json"


def _problems(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(entry)"
        if item["type"] == "extra_forbidden":
            what = "unknown key"
        elif item["type"] == "missing":
            what = "required key is missing"
        else:
            what = f"{item['msg']} (got {item.get('input')!r})"
        parts.append(f"{key}: {what}")
    return "; ".join(parts)


def _parse_server(path: Path, name: str, entry: Any) -> McpServer:
    where = f"{path}: server {name!r}"
    if not SERVER_NAME.match(name):
        raise ConfigError(f"{where}: a server name may hold only letters, digits, '-' and '_'")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be an object, got {type(entry).__name__}")
    kind = entry.get("type", "stdio" if "command" in entry else None)
    model: type[StdioServer] | type[HttpServer]
    if kind == "stdio":
        model = StdioServer
    elif kind in ("http", "streamable-http"):
        model = HttpServer
        entry = {**entry, "type": "http"}
    elif kind == "sse":
        raise ConfigError(
            f'{where}: the SSE transport is not supported; use "type": "http" '
            "(streamable HTTP) if the server offers it"
        )
    elif kind is None:
        raise ConfigError(
            f'{where}: give "command" (a server Atlas starts) or "type": "http" with a "url"'
        )
    else:
        raise ConfigError(f'{where}: unknown type {kind!r} (known: "stdio", "http")')
    try:
        server = model.model_validate(entry)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_problems(exc)}") from None
    return server.model_copy(update={"name": name, "source": str(path)})


def load_mcp_config(path: Path) -> McpConfig:
    """Read mcp.json; a missing file means no servers. Raises ConfigError naming the fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return McpConfig(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        return McpConfig(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: malformed JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f'{path}: must be a JSON object with "mcpServers"')
    unknown = sorted(set(data) - {"mcpServers"})
    if unknown:
        raise ConfigError(
            f'{path}: unknown top-level key(s) {", ".join(unknown)}; expected "mcpServers"'
        )
    entries = data.get("mcpServers", {})
    if not isinstance(entries, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object of name → server')
    return McpConfig(path, {name: _parse_server(path, name, e) for name, e in entries.items()})
