"""`atlas tool mcp__SERVER__TOOL`: MCP servers loaded from mcp.json as the daemon loads them
(in their sandbox by default), so a server's tool can be tried from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import BASE_CONFIG, make_home
from tests.integration.test_cli import Case, Done, run_together

FAKE_SERVER = Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py"
NO_WAIT = "\n[mcp]\nstartup_wait = 0.0\n"


@pytest.fixture(scope="module")
def mcp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    home = tmp_path_factory.mktemp("mcp") / "home"
    # No start-up wait: `atlas tool` must still wait for the server its tool names.
    make_home(home, config=BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + NO_WAIT)
    servers = {
        "notes": {"command": sys.executable, "args": [str(FAKE_SERVER)]},
        "broken": {"command": str(home / "no-such-server")},
    }
    (home / "mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return run_together(
        {
            "echo": Case(["tool", "mcp__notes__echo", '{"text": "hello from mcp"}'], home),
            "broken": Case(["tool", "mcp__broken__anything", "{}"], home),
        }
    )


def test_an_mcp_tool_runs_from_the_command_line(mcp_runs: dict[str, Done]) -> None:
    done = mcp_runs["echo"]
    assert done.code == 0, done.out + done.err
    assert done.out.strip() == "hello from mcp"


def test_a_server_that_failed_is_named_with_why(mcp_runs: dict[str, Done]) -> None:
    done = mcp_runs["broken"]
    assert done.code == 2
    assert "no tool named 'mcp__broken__anything'" in done.err
    assert "MCP server broken is failed" in done.err, done.err
