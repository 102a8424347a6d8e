"""Keeping secrets out of what Atlas shows: the environment of commands bots run, and logs.

Secrets live only in environment variables that the config names (`api_key_env`, `token_env`,
…). A bot's `run_command` has no reason to see them — `env` would print them into the
conversation — so they are removed from its environment; and their values are masked in logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from atlas.home import Home

MASK = "[secret]"
MIN_SECRET_LENGTH = 6  # shorter values would mask ordinary words


def secret_env_names(home: Home) -> set[str]:
    """Every environment variable the home's config names as holding a secret."""
    from atlas.channels.settings import SlackSettings, TelegramSettings

    settings = home.settings
    names = {p.api_key_env for p in settings.providers.values() if p.api_key_env}
    names |= {settings.web.tavily_api_key_env, settings.web.brave_api_key_env}
    for model in (TelegramSettings, SlackSettings):  # the defaults, used when bot.toml is silent
        names |= {
            f.default for n, f in model.model_fields.items() if n.endswith("_env") and f.default
        }
    for bot in home.bots.values():
        for table in bot.settings.channels.values():
            names |= {v for k, v in table.items() if k.endswith("_env") and isinstance(v, str)}
    return names


def command_env(home: Home, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for commands a bot runs: Atlas's own, less every secret."""
    hidden = secret_env_names(home)
    return {
        k: v for k, v in (os.environ if environ is None else environ).items() if k not in hidden
    }


class RedactSecrets(logging.Filter):
    """Masks secret values in every log record that passes (message and arguments)."""

    def __init__(self, values: set[str]) -> None:
        super().__init__()
        self.values = sorted(
            (v for v in values if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True
        )

    def filter(self, record: logging.LogRecord) -> bool:
        if self.values:
            message = record.getMessage()
            for value in self.values:
                message = message.replace(value, MASK)
            record.msg, record.args = message, None
        return True


def redact_logs(home: Home) -> None:
    """Install the mask on the root logger's handlers (idempotent)."""
    values = {os.environ[n] for n in secret_env_names(home) if os.environ.get(n)}
    for handler in logging.getLogger().handlers:
        handler.filters = [f for f in handler.filters if not isinstance(f, RedactSecrets)]
        handler.addFilter(RedactSecrets(values))
