"""`[channels.telegram]`, `[channels.slack]` and a channel plugin's `[channels.<name>]` of a
bot.toml, validated.

BotSettings keeps `channels` as a plain dict (so config.py needs no channel knowledge); these
models check it before the daemon starts anything (`check_channels`) and again when a channel
starts, with errors naming the bot.toml, the key and its line. Secrets are
never in the file: each names the environment variable that holds it.

A channel plugin (entry-point group `atlas.channels`, docs/plugins.md) declares its settings as
`settings_model`, a subclass of ChannelSettings (the shared keys plus its own), whose
`secrets()` names the `*_env` keys it needs; one that declares none takes the shared keys only.
"""

from __future__ import annotations

import os
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator

from atlas.config import Strict, find_line, read_toml
from atlas.errors import ConfigError
from atlas.home import Bot
from atlas.plugins import CHANNELS_GROUP, PluginError, installed_names, load_plugin

Platform = Literal["telegram", "slack"]
PLATFORMS: tuple[Platform, ...] = ("telegram", "slack")
SettingsT = TypeVar("SettingsT", bound="ChannelSettings")


class ChannelSettings(Strict):
    """What every platform shares."""

    enabled: bool = True
    # User ids that may talk to the bot without pairing (Telegram: numbers; Slack: U…).
    allowed_users: list[str] = Field(default_factory=list)
    # In groups: "mention" answers only when mentioned or replied to; "all" answers everything.
    groups: Literal["mention", "all"] = "mention"
    # In groups, one conversation for everyone instead of one per person.
    group_shared: bool = False
    api_base: str | None = None  # another Bot/Web API endpoint (self-hosted server, proxy, test)
    inbox_max_mb: float = Field(20.0, gt=0)  # larger files are refused with a reply

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        # Telegram ids are numbers in TOML; they are compared as text everywhere.
        if isinstance(value, list):
            return [str(item) for item in value]
        return value

    @property
    def inbox_max_bytes(self) -> int:
        return int(self.inbox_max_mb * 1024 * 1024)

    def secrets(self) -> list[tuple[str, str | None]]:
        """(key, environment variable) of every secret the channel needs in its mode: a
        plugin's settings override it; `check_channels` requires each variable set."""
        return []


class TelegramSettings(ChannelSettings):
    token_env: str = "TELEGRAM_BOT_TOKEN"
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout: int = Field(30, ge=1, le=50)  # seconds a getUpdates call waits
    webhook_url: str | None = None  # the public https URL Telegram posts to
    webhook_secret_env: str | None = None  # its X-Telegram-Bot-Api-Secret-Token
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(8443, ge=1, le=65535)


class SlackSettings(ChannelSettings):
    bot_token_env: str = "SLACK_BOT_TOKEN"  # xoxb-…
    app_token_env: str = "SLACK_APP_TOKEN"  # xapp-…, for Socket Mode
    signing_secret_env: str = "SLACK_SIGNING_SECRET"  # for the HTTP Events API
    mode: Literal["socket", "http"] = "socket"
    http_listen: str = "127.0.0.1"
    http_port: int = Field(3000, ge=1, le=65535)
    http_path: str = "/slack/events"


_MODELS: dict[str, type[ChannelSettings]] = {"telegram": TelegramSettings, "slack": SlackSettings}


def _line_note(bot: Bot, loc: tuple[str, ...]) -> str:
    """` (line N)` of a key in the bot's bot.toml, or the line of its table; "" when unknown."""
    try:
        _, text = read_toml(bot.root / "bot.toml")
    except ConfigError:
        return ""
    line = find_line(text, loc)
    return f" (line {line})" if line else ""


def channel_settings(bot: Bot, platform: str, model: type[SettingsT]) -> SettingsT:
    """The bot's `[channels.<platform>]`, validated; ConfigError names bot.toml, the key and
    its line."""
    path = bot.root / "bot.toml"
    raw = bot.settings.channels.get(platform)
    if raw is None:
        raise ConfigError(f"{path}: no [channels.{platform}] table")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for item in exc.errors():
            loc = ("channels", platform, *(str(part) for part in item["loc"]))
            if item["type"] == "extra_forbidden":
                what = "unknown key"
                if loc[-1] in ("token", "secret", "app_token", "bot_token"):
                    what += "; secrets never go in bot.toml: name an environment variable (*_env)"
                else:
                    known = ", ".join(model.model_fields)
                    what += f" (known: {known})"
            else:
                what = f"{item['msg'].removeprefix('Value error, ')} (got {item.get('input')!r})"
            problems.append(f"  {'.'.join(loc)}{_line_note(bot, loc)}: {what}")
        raise ConfigError(f"{path}: invalid settings\n" + "\n".join(problems)) from None


def required_secrets(platform: str, settings: ChannelSettings) -> list[tuple[str, str | None]]:
    """(key, environment variable) of every secret a channel needs in its mode."""
    if isinstance(settings, TelegramSettings):
        needed: list[tuple[str, str | None]] = [("token_env", settings.token_env)]
        if settings.mode == "webhook":
            needed.append(("webhook_secret_env", settings.webhook_secret_env))
        return needed
    if isinstance(settings, SlackSettings):
        needed = [("bot_token_env", settings.bot_token_env)]
        if settings.mode == "socket":
            needed.append(("app_token_env", settings.app_token_env))
        else:
            needed.append(("signing_secret_env", settings.signing_secret_env))
        return needed
    return settings.secrets()  # a plugin channel's own


def check_channels(bot: Bot) -> None:
    """Every enabled `[channels.*]` of a bot: known platform, known keys, valid values, and
    each secret's environment variable set. Run before the daemon starts anything, so a
    mistake stops it with the file, key and line instead of a silent "none configured"."""
    for platform in configured_platforms(bot):
        settings = channel_settings(bot, platform, settings_model(bot, platform))
        telegram = settings if isinstance(settings, TelegramSettings) else None
        if telegram and telegram.mode == "webhook" and not telegram.webhook_url:
            loc = ("channels", platform, "mode")
            raise ConfigError(
                f"{bot.root / 'bot.toml'}: channels.telegram.mode{_line_note(bot, loc)} is "
                "'webhook' but channels.telegram.webhook_url is not set (the public https "
                "URL Telegram posts to)"
            )
        for key, env_name in required_secrets(platform, settings):
            secret(bot, platform, key, env_name)


def chat_platforms() -> tuple[str, ...]:
    """The platforms a bot.toml may configure ([channels.<platform>]): the built-in ones and
    every installed channel plugin."""
    return tuple(sorted(set(_MODELS) | set(installed_names(CHANNELS_GROUP))))


def settings_model(bot: Bot, platform: str) -> type[ChannelSettings]:
    """The settings class of `[channels.<platform>]`: the built-in one, or what the channel
    plugin of that name declares (`settings_model`; the shared keys when it declares none)."""
    if platform in _MODELS:
        return _MODELS[platform]
    where = (
        f"{bot.root / 'bot.toml'}: [channels.{platform}]{_line_note(bot, ('channels', platform))}"
    )
    try:
        plugin = load_plugin(CHANNELS_GROUP, platform)
    except PluginError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    model = getattr(plugin.target, "settings_model", ChannelSettings)
    if not (isinstance(model, type) and issubclass(model, ChannelSettings)):
        raise ConfigError(
            f"{where}: the channel plugin {plugin.source} declares settings_model = {model!r}, "
            "which is not a subclass of atlas.channels.settings.ChannelSettings: update the package"
        )
    return model


def configured_platforms(bot: Bot) -> list[str]:
    """The platforms a bot.toml configures and enables; an unknown platform is an error."""
    path = bot.root / "bot.toml"
    found = []
    for platform, raw in bot.settings.channels.items():
        if platform not in _MODELS and platform not in (kinds := chat_platforms()):
            where = _line_note(bot, ("channels", platform))
            raise ConfigError(
                f"{path}: [channels.{platform}]{where}: unknown channel: no installed channel "
                f"plugin provides {platform!r} (installed channel kinds: {', '.join(kinds)}; "
                "a plugin registers under the atlas.channels entry points, docs/plugins.md)"
            )
        if isinstance(raw, dict) and raw.get("enabled", True) is False:
            continue
        found.append(platform)
    return found


def secret(bot: Bot, platform: str, key: str, env_name: str | None) -> str:
    """The secret held by the environment variable a setting names; ConfigError when unset."""
    value = os.environ.get(env_name) if env_name else None
    if not value:
        loc = ("channels", platform, key)
        what = (
            f"names the environment variable {env_name!r}, which is not set; "
            "export it before `atlas run`"
            if env_name
            else "is not set: name the environment variable that holds this secret"
        )
        raise ConfigError(
            f"{bot.root / 'bot.toml'}: channels.{platform}.{key}{_line_note(bot, loc)} {what}"
        )
    return value


__all__ = [
    "PLATFORMS",
    "ChannelSettings",
    "SlackSettings",
    "TelegramSettings",
    "channel_settings",
    "check_channels",
    "configured_platforms",
    "required_secrets",
    "secret",
    "settings_model",
]
