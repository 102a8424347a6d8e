"""`atlas plugins` lists every installed plugin: its package, the SDK version it is written
for, and whether the home uses it, and why not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlas.cli import main
from tests.helpers import BASE_CONFIG, make_home
from tests.plugin_packages import PluginInstaller, plugin_installer  # noqa: F401

PACKAGE = """
class TinyChannel:
    sdk_version = 1


class OldExecutor:
    sdk_version = 1  # the executor SDK before this Atlas's (2)
"""


def test_plugins_lists_each_with_its_version_and_why_it_is_on_or_off(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    plugin_installer: PluginInstaller,  # noqa: F811
) -> None:
    plugin_installer(
        name="atlas-extras",
        version="0.2",
        modules={"atlas_extras_cli": PACKAGE},
        entry_points={
            "atlas.channels": {"tiny": "atlas_extras_cli:TinyChannel"},
            "atlas.executors": {"aider": "atlas_extras_cli:OldExecutor"},
        },
    )
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    root = tmp_path / "home"
    make_home(root, config=config + "\n[executors.codex]\nenabled = true\n")
    with (root / "bots" / "atlas" / "bot.toml").open("a") as bot_toml:
        bot_toml.write('\n[channels.tiny]\nroom = "general"\n')

    assert main(["--home", str(root), "plugins"]) == 0
    text = capsys.readouterr().out
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert "atlas.channels (this Atlas speaks SDK version 1)" in text
    assert "atlas.executors (this Atlas speaks SDK version 2)" in text
    assert "atlas-extras==0.2  SDK 1  enabled: [channels.tiny] of bot(s) atlas" in lines["tiny"]
    assert "not enabled: no bot.toml has [channels.telegram]" in lines["telegram"]
    assert "SDK 2  enabled: [executors.codex] in config.toml" in lines["codex"]
    assert "no [executors.claude-code] table" in lines["claude-code"]
    assert lines["aider"].split()[1:4] == ["atlas-extras==0.2", "SDK", "1"]
    assert (
        "not enabled: refused: written for SDK version 1, this Atlas speaks version 2"
        in (lines["aider"])
    )

    assert main(["plugins", "--json", "--home", str(root)]) == 0
    found = {item["name"]: item for item in json.loads(capsys.readouterr().out)}
    assert found["tiny"]["enabled"] is True and found["tiny"]["sdk_version"] == 1
    assert found["aider"]["enabled"] is False and found["aider"]["group"] == "atlas.executors"
