"""start_channels: every configured channel starts; a failing one is retried, others go on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from atlas.channels import manager
from atlas.dispatch import Dispatcher
from atlas.home import Bot, Home
from atlas.providers.scripted import ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.registry import ToolRegistry
from tests.helpers import make_home


class FlakyChannel:
    streams = False

    def __init__(self, name: str, failures: int) -> None:
        self.name = name
        self.failures = failures
        self.attempts = 0
        self.started = asyncio.Event()
        self.stopped = False

    async def start(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise OSError("connection refused")
        self.started.set()

    async def stop(self) -> None:
        self.stopped = True


async def test_a_failing_channel_is_retried_while_the_other_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "home"
    make_home(root)
    bot_toml = root / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + "\n[channels.telegram]\n[channels.slack]\n")
    home = Home(root)
    made: dict[str, FlakyChannel] = {}

    def fake_create(bot: Bot, platform: str, dispatcher: Dispatcher) -> FlakyChannel:
        made[platform] = FlakyChannel(f"{platform}:{bot.name}", 2 if platform == "slack" else 0)
        return made[platform]

    monkeypatch.setattr(manager, "create_channel", fake_create)
    runtime = Runtime(home, model=ScriptedModel(), registry=ToolRegistry())
    dispatcher = Dispatcher(runtime, {})
    running = await manager.start_channels(home, dispatcher, first_delay=0.01, wait=2)
    assert set(running) == {"telegram:atlas", "slack:atlas"}
    assert set(dispatcher.channels) == set(running)
    assert made["telegram"].started.is_set()
    async with asyncio.timeout(2):
        await made["slack"].started.wait()
    assert made["slack"].attempts == 3
    await manager.stop_channels(running)
    assert made["telegram"].stopped and made["slack"].stopped
    await runtime.close()


async def test_a_bad_setting_names_bot_toml_and_the_key(home: Home) -> None:
    from atlas.channels.settings import TelegramSettings, channel_settings
    from atlas.errors import ConfigError

    bot = home.bot("atlas")
    broken = Bot(
        bot.name,
        bot.root,
        bot.settings.model_copy(
            update={"channels": {"telegram": {"token": "x", "groups": "some"}}}
        ),
        home,
    )
    with pytest.raises(ConfigError) as caught:
        channel_settings(broken, "telegram", TelegramSettings)
    message = str(caught.value)
    assert "bot.toml" in message
    assert "channels.telegram.token: unknown key; secrets never go in bot.toml" in message
    assert "channels.telegram.groups" in message


def test_the_built_in_channels_are_plugins_of_the_channel_sdk() -> None:
    """Telegram and Slack register under the atlas.channels entry points as a third-party
    channel would, and are loaded one at a time by name."""
    from atlas.channels.slack.channel import SlackChannel
    from atlas.channels.telegram.channel import TelegramChannel
    from atlas.plugins import CHANNELS_GROUP, PluginError, load_plugin

    assert load_plugin(CHANNELS_GROUP, "telegram").target is TelegramChannel
    assert load_plugin(CHANNELS_GROUP, "slack").target is SlackChannel
    with pytest.raises(PluginError, match="no atlas.channels plugin named 'irc'.*slack, telegram"):
        load_plugin(CHANNELS_GROUP, "irc")


def test_a_plugin_of_another_sdk_version_is_refused_with_its_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import EntryPoint

    from atlas import plugins

    class OldChannel:
        sdk_version = 0

    point = EntryPoint("old", "somewhere:OldChannel", plugins.CHANNELS_GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [point])
    monkeypatch.setattr(EntryPoint, "load", lambda self: OldChannel)
    with pytest.raises(plugins.PluginError, match="SDK version 0.*speaks version 1"):
        plugins.load_plugin(plugins.CHANNELS_GROUP, "old")
