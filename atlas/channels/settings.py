"""`[channels.telegram]` and `[channels.slack]` of a bot.toml, validated.

BotSettings keeps `channels` as a plain dict (so config.py needs no channel knowledge); these
models check it when a channel starts, with errors naming the bot.toml and the key. Secrets are
never in the file: each names the environment variable that holds it.
"""

from __future__ import annotations

import os
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator

from atlas.config import Strict
from atlas.errors import ConfigError
from atlas.home import Bot

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


def channel_settings(bot: Bot, platform: str, model: type[SettingsT]) -> SettingsT:
    """The bot's `[channels.<platform>]`, validated; ConfigError names bot.toml and the key."""
    path = bot.root / "bot.toml"
    raw = bot.settings.channels.get(platform)
    if raw is None:
        raise ConfigError(f"{path}: no [channels.{platform}] table")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for item in exc.errors():
            key = ".".join(["channels", platform, *(str(part) for part in item["loc"])])
            if item["type"] == "extra_forbidden":
                what = "unknown key"
                if str(item["loc"][-1]) in ("token", "secret", "app_token", "bot_token"):
                    what += "; secrets never go in bot.toml: name an environment variable (*_env)"
            else:
                what = f"{item['msg'].removeprefix('Value error, ')} (got {item.get('input')!r})"
            problems.append(f"  {key}: {what}")
        raise ConfigError(f"{path}: invalid settings\n" + "\n".join(problems)) from None


def configured_platforms(bot: Bot) -> list[str]:
    """The platforms a bot.toml configures and enables; an unknown platform is an error."""
    path = bot.root / "bot.toml"
    found = []
    for platform, raw in bot.settings.channels.items():
        if platform not in _MODELS:
            known = ", ".join(_MODELS)
            raise ConfigError(f"{path}: [channels.{platform}]: unknown channel (known: {known})")
        if isinstance(raw, dict) and raw.get("enabled", True) is False:
            continue
        found.append(platform)
    return found


def secret(bot: Bot, platform: str, key: str, env_name: str | None) -> str:
    """The secret held by the environment variable a setting names; ConfigError when unset."""
    value = os.environ.get(env_name) if env_name else None
    if not value:
        raise ConfigError(
            f"{bot.root / 'bot.toml'}: channels.{platform}.{key} names the environment variable "
            f"{env_name!r}, which is not set; export it before `atlas run`"
        )
    return value


__all__ = [
    "PLATFORMS",
    "ChannelSettings",
    "SlackSettings",
    "TelegramSettings",
    "channel_settings",
    "configured_platforms",
    "secret",
]
