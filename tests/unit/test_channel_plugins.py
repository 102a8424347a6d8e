"""A third-party channel plugin, installed through its entry point, is configured under
`[channels.<name>]` with the settings it declares; a name no plugin provides is refused naming
the file, the table and the installed channel kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.channels import manager
from atlas.channels.settings import chat_platforms, check_channels
from atlas.dispatch import Dispatcher
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.providers.scripted import ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.helpers import make_home
from tests.plugin_packages import PluginInstaller, plugin_installer  # noqa: F401

TINY_CHANNEL = """
from atlas.channels.settings import ChannelSettings, channel_settings


class TinySettings(ChannelSettings):
    room: str
    token_env: str = "ATLAS_TEST_TINY_TOKEN"

    def secrets(self):
        return [("token_env", self.token_env)]


class TinyChannel:
    sdk_version = 1
    settings_model = TinySettings
    streams = False
    started = []

    def __init__(self, name, settings):
        self.name, self.settings = name, settings

    @classmethod
    def create(cls, bot, dispatcher):
        return cls(f"tiny:{bot.name}", channel_settings(bot, "tiny", TinySettings))

    async def start(self):
        TinyChannel.started.append((self.name, self.settings.room))

    async def stop(self):
        pass
"""


def install_tiny(plugin_installer: PluginInstaller) -> None:  # noqa: F811
    plugin_installer(
        name="atlas-tiny-channel",
        version="0.3",
        modules={"atlas_tiny_channel": TINY_CHANNEL},
        entry_points={"atlas.channels": {"tiny": "atlas_tiny_channel:TinyChannel"}},
    )


def home_with(tmp_path: Path, table: str) -> Home:
    root = tmp_path / "home"
    make_home(root)
    with (root / "bots" / "atlas" / "bot.toml").open("a") as bot_toml:
        bot_toml.write("\n" + table)
    return Home(root)


def test_a_channel_no_plugin_provides_names_file_table_and_installed_kinds(
    tmp_path: Path,
) -> None:
    home = home_with(tmp_path, '[channels.tiny]\nroom = "general"\n')
    with pytest.raises(ConfigError) as caught:
        check_channels(home.bots["atlas"])
    message = str(caught.value)
    assert str(home.bots["atlas"].root / "bot.toml") in message
    assert "[channels.tiny] (line" in message
    assert "no installed channel plugin provides 'tiny'" in message
    assert "installed channel kinds: slack, telegram" in message


def test_a_plugin_channel_is_checked_with_the_settings_it_declares(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plugin_installer: PluginInstaller,  # noqa: F811
) -> None:
    install_tiny(plugin_installer)
    assert {"tiny", "telegram", "slack"} <= set(chat_platforms())
    home = home_with(tmp_path, '[channels.tiny]\nroom = "general"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match=r"channels\.tiny\.colour \(line \d+\): unknown key"):
        check_channels(home.bots["atlas"])
    home = home_with(tmp_path / "2", "[channels.tiny]\n")
    with pytest.raises(ConfigError, match=r"channels\.tiny\.room.*Field required"):
        check_channels(home.bots["atlas"])
    home = home_with(tmp_path / "3", '[channels.tiny]\nroom = "general"\n')
    monkeypatch.delenv("ATLAS_TEST_TINY_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="channels.tiny.token_env.*'ATLAS_TEST_TINY_TOKEN'"):
        check_channels(home.bots["atlas"])
    monkeypatch.setenv("ATLAS_TEST_TINY_TOKEN", "not-a-real-token")
    check_channels(home.bots["atlas"])


async def test_a_plugin_channel_starts_with_the_others(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plugin_installer: PluginInstaller,  # noqa: F811
) -> None:
    install_tiny(plugin_installer)
    monkeypatch.setenv("ATLAS_TEST_TINY_TOKEN", "not-a-real-token")
    home = home_with(tmp_path, '[channels.tiny]\nroom = "general"\n')
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    running = await manager.start_channels(home, dispatcher, first_delay=0.01, wait=2)
    try:
        assert set(running) == {"tiny:atlas"}
        from atlas_tiny_channel import TinyChannel  # type: ignore[import-not-found]

        assert TinyChannel.started == [("tiny:atlas", "general")]
    finally:
        await manager.stop_channels(running)
        await runtime.close()
