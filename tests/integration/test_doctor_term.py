"""`atlas doctor` and `atlas chat` on what they missed: a malformed mcp.json (with the JSON
error's position), an unknown tool name in bot.toml (chat accepted it while run and doctor
refused it: one check, one message), a missing MISSION.md, and a key the provider rejected
(the fix said "set the variable" while it was set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from atlas.doctor import _mission_checks, _provider_check, _start_checks
from atlas.home import Home
from atlas.mcp.doctor_checks import mcp_checks
from tests.fakes.model_servers import FakeOpenAIServer
from tests.helpers import BASE_CONFIG, make_home


def atlas(home: Path, *words: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlas.cli", *words],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "ATLAS_HOME": str(home)},
        timeout=60,
    )


async def test_doctor_reads_a_malformed_mcp_json_and_names_the_position(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    (home.root / "mcp.json").write_text('{"mcpServers": {"x": {"command": "y",}}}')
    [(name, ok, detail, fix)] = await mcp_checks(home)
    assert (name, ok) == ("mcp", False)
    assert str(home.root / "mcp.json") in detail and "(line 1, column 38)" in detail, detail
    assert "mcp.json" in fix


def test_chat_refuses_an_unknown_tool_name_as_run_and_doctor_do(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    bot_toml = home.bot(None).root / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + '\ntools = ["read_file", "raed_file"]\n')
    chat = atlas(home.root, "chat", stdin="hello\n")
    [doctor_line] = [c for c in _start_checks(Home(home.root)) if c.name.endswith("tools")]
    assert chat.returncode == 2, chat.stdout + chat.stderr
    assert "you>" not in chat.stdout  # refused before the chat began
    assert chat.stderr.strip() == f"atlas: {doctor_line.detail}"
    assert "unknown tool name(s) 'raed_file'" in doctor_line.detail
    assert str(bot_toml) in doctor_line.detail


def test_a_missing_or_empty_mission_is_reported(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    assert _mission_checks(home) == []
    mission = home.bot(None).mission_path
    mission.unlink()
    [missing] = _mission_checks(home)
    assert missing.optional and not missing.ok
    assert f"{mission} is missing" in missing.detail and str(mission) in missing.fix
    mission.write_text("\n  \n")
    [empty] = _mission_checks(home)
    assert f"{mission} is empty" in empty.detail


@pytest.mark.parametrize("key_set", [True, False])
async def test_the_fix_for_a_rejected_key_says_it_was_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_set: bool
) -> None:
    async with FakeOpenAIServer() as server:
        server.fail(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}})
        config = BASE_CONFIG.format(base_url=server.base_url).replace(
            "max_retries = 0", 'max_retries = 0\napi_key_env = "ATLAS_TEST_KEY"'
        )
        home = make_home(tmp_path / "home", config=config)
        if key_set:
            monkeypatch.setenv("ATLAS_TEST_KEY", "sk-wrong")
        else:
            monkeypatch.delenv("ATLAS_TEST_KEY", raising=False)
        check = await _provider_check(home)
    assert not check.ok
    if key_set:
        assert "rejected the key in ATLAS_TEST_KEY" in check.fix and "replace" in check.fix
        assert "set the" not in check.fix
    else:  # no key at all: never sent, so set it
        assert check.fix.startswith("set the environment variable ATLAS_TEST_KEY"), check.fix
