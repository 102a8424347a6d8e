"""Secrets stay out of what bots run and what Atlas logs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.secrets import MASK, RedactSecrets, command_env, redact_logs, secret_env_names
from atlas.tools.shell import run_command
from tests.helpers import BASE_CONFIG, make_home, run_context

CONFIG = BASE_CONFIG.replace('kind = "openai"\n', 'kind = "openai"\napi_key_env = "FAKE_API_KEY"\n')


def test_the_names_come_from_config_and_channel_settings(home_path: Path) -> None:
    home = make_home(home_path, config=CONFIG.format(base_url="http://127.0.0.1:9/v1"))
    bot_toml = home.bot(None).root / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + '\n[channels.telegram]\ntoken_env = "MY_TG"\n')
    names = secret_env_names(Home(home_path))
    assert {"FAKE_API_KEY", "MY_TG", "TAVILY_API_KEY", "SLACK_BOT_TOKEN"} <= names
    env = command_env(home, {"FAKE_API_KEY": "sk-1", "PATH": "/bin", "HOME": "/root"})
    assert env == {"PATH": "/bin", "HOME": "/root"}


async def test_run_command_cannot_print_the_keys(
    home_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "sk-very-secret-value")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    home = make_home(home_path, config=CONFIG.format(base_url="http://127.0.0.1:9/v1"))
    result = await run_command.invoke(run_context(home), {"command": "env"})
    assert "sk-very-secret-value" not in result.text and "PATH=" in result.text
    # The sandbox's environment is an allow-list (docs/sandbox.md): other variables stay out too.
    assert "HARMLESS_SETTING" not in result.text


def test_logs_mask_secret_values(
    home_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "sk-very-secret-value")
    home = make_home(home_path, config=CONFIG.format(base_url="http://127.0.0.1:9/v1"))
    handler = logging.StreamHandler()
    logging.getLogger().addHandler(handler)
    try:
        redact_logs(home)
        assert any(isinstance(f, RedactSecrets) for f in handler.filters)
        record = logging.LogRecord(
            "x", logging.INFO, __file__, 1, "key is %s", ("sk-very-secret-value",), None
        )
        handler.filter(record)
        assert record.getMessage() == f"key is {MASK}"
    finally:
        logging.getLogger().removeHandler(handler)
