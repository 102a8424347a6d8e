"""A verdict for every tool (issue 37): `atlas tools` says what a run is offered and why not, and
the model is told the same reason when it calls a tool it is not offered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlas.cli import main as atlas_main
from atlas.home import Home
from atlas.mcp.manager import McpManager
from atlas.newbot import create_bot
from atlas.tools.catalog import default_registry
from tests.helpers import make_home, run_context


@pytest.fixture
def two_bots(tmp_path: Path) -> Home:
    home = make_home(tmp_path / "home")
    create_bot(home, "scout", "Scout", "Finds facts.")
    with (home.root / "bots" / "scout" / "bot.toml").open("a") as toml:
        toml.write('\ntools = ["read_file", "find_files", "cronjob_manage"]\n')
    (home.root / "mcp.json").write_text(
        json.dumps(
            {"mcpServers": {"github": {"command": "github-mcp"}, "notes": {"command": "notes-mcp"}}}
        )
    )
    with (home.root / "bots" / "atlas" / "bot.toml").open("a") as toml:
        toml.write('\nmcp_servers = ["github"]\n')
    return Home(home.root)


def verdicts(home: Home, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, dict]:
    assert atlas_main(["--home", str(home.root), "tools", "--json", *args]) == 0
    return {v["name"]: v for v in json.loads(capsys.readouterr().out)}


def test_every_tool_has_a_verdict_and_a_reason(
    two_bots: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    main = verdicts(two_bots, capsys)
    assert set(main) >= {t.name for t in default_registry()}  # every built-in tool is judged
    assert main["read_file"]["state"] == "offered" and main["read_file"]["tokens"] > 0
    assert main["plan"]["state"] == "deferred"
    assert main["ask_parent"]["state"] == "not offered"
    assert "only for subagents" in main["ask_parent"]["why"]
    assert main["message_agent"]["state"] == "offered"  # the home has a second bot
    assert "no executor is turned on" in main["executor_accounts"]["why"]
    assert main["mcp__github__*"]["state"] == "deferred"
    assert "mcp_servers does not name it" in main["mcp__notes__*"]["why"]

    scout = verdicts(two_bots, capsys, "--bot", "scout")
    assert scout["find_files"]["state"] == "offered"
    assert "not in bot 'scout''s tools list" in scout["run_command"]["why"]
    assert scout["cronjob_manage"]["state"] == "deferred"
    assert "not in bot 'scout''s tools list" in scout["bot_create"]["why"]

    routine = verdicts(two_bots, capsys, "--kind", "routine")
    assert "not available in a routine run" in routine["ask_user"]["why"]
    subagent = verdicts(two_bots, capsys, "--kind", "subagent")
    assert subagent["delegate"]["state"] == "not offered"
    assert subagent["ask_parent"]["state"] == "offered"


async def test_the_model_reads_the_reason_the_person_sees(
    two_bots: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    routine = verdicts(two_bots, capsys, "--kind", "routine")
    run = run_context(two_bots, kind="routine")
    result = await default_registry().call(run, "ask_user", {"questions": [{"question": "?"}]})
    assert result.is_error
    assert (
        result.text == f"Error: ask_user is not offered to this run: {routine['ask_user']['why']}"
    )


def test_the_table_reads_for_a_person(two_bots: Home, capsys: pytest.CaptureFixture[str]) -> None:
    assert atlas_main(["--home", str(two_bots.root), "tools", "--kind", "routine"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Tools of bot atlas in a routine run:")
    assert "ask_user" in out and "not offered" in out and "offered (" in out.splitlines()[-1]


async def test_a_tool_of_a_server_that_is_down_says_so(two_bots: Home) -> None:
    manager = McpManager(two_bots)  # not started: github is still connecting
    registry = manager.registry_over(default_registry())
    run = run_context(two_bots)
    down = await registry.call(run, "mcp__github__create_issue", {})
    assert down.is_error
    assert down.text.startswith(
        "Error: mcp__github__create_issue is not offered to this run: its MCP server 'github' is"
    )
    unknown = await registry.call(run, "mcp__jira__create", {})
    assert "mcp.json's servers: github, notes" in unknown.text
    plain = await registry.call(run, "no_such_tool", {})
    assert plain.text.startswith("Error: there is no tool named 'no_such_tool'")
