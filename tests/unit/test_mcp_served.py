"""With worker processes, each process starts only the MCP servers its own bots may use."""

from __future__ import annotations

import json
from pathlib import Path

from atlas.home import Home
from atlas.mcp.manager import McpManager
from atlas.newbot import create_bot
from tests.helpers import make_home


def home_with_two_servers(root: Path) -> Home:
    home = make_home(root)
    servers = {name: {"command": "true"} for name in ("github", "notes")}
    (home.root / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    create_bot(home, "coder", "Coder", "Writes code.")
    for bot, server in (("coder", "github"), ("atlas", "notes")):
        toml = home.root / "bots" / bot / "bot.toml"
        toml.write_text(f"mcp_servers = {{ {server} = {{}} }}\n" + toml.read_text())
    return Home(home.root)


def test_each_process_starts_its_own_bots_servers(tmp_path: Path) -> None:
    home = home_with_two_servers(tmp_path / "home")
    assert {s.name for s in McpManager(home).status()} == {"github", "notes"}  # one process
    home.served = frozenset({"coder"})
    assert {s.name for s in McpManager(home).status()} == {"github"}
    home.served = frozenset({"atlas"})
    assert {s.name for s in McpManager(home).status()} == {"notes"}
