"""Every TOML example in the docs and the README loads: a config.toml fragment through the
settings' own loader, a bot.toml fragment through the bot's. (Routine files are loaded by
tests/unit/test_routine_targets.py; a plugin's pyproject.toml is Python packaging's.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from atlas.config import load_bot_settings, load_settings
from atlas.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
# The least a home's config.toml needs, declaring no table an example may declare.
MINIMAL_CONFIG = """\
main = "atlas"
timezone = "UTC"
model = "fake/test-model"

[providers.fake]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
"""
BLOCK = re.compile(r"^( *)```toml\n(.*?)^\1```", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    found = []
    for path in [*sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "README.md"]:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            indent = match.group(1)
            body = "\n".join(line.removeprefix(indent) for line in match.group(2).splitlines())
            line = text[: match.start()].count("\n") + 1
            found.append((f"{path.relative_to(REPO_ROOT)}:{line}", body + "\n"))
    return found


EXAMPLES = _examples()


def _kind(body: str) -> str:
    keys = set(tomllib.loads(body))
    if keys & {"schedule", "prompt"}:
        return "routine file"
    if keys == {"project"}:
        return "pyproject"
    return "settings"


def test_the_docs_have_toml_examples() -> None:
    assert len(EXAMPLES) >= 15  # a broken pattern would find none and pass everything


@pytest.mark.parametrize(("where", "body"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_a_toml_example_loads(where: str, body: str, tmp_path: Path) -> None:
    if _kind(body) != "settings":
        return  # loaded elsewhere (see the module's docstring)
    config = tmp_path / "config.toml"
    config.write_text(MINIMAL_CONFIG + "\n" + body)
    try:
        settings = load_settings(config)
    except ConfigError as as_config:
        # Not the home's settings: then a bot's (its channels, tools, executors, sandbox).
        bot_toml = tmp_path / "bot.toml"
        bot_toml.write_text(body)
        try:
            base = tmp_path / "base.toml"
            base.write_text(MINIMAL_CONFIG)
            load_bot_settings(bot_toml, load_settings(base))
        except ConfigError as as_bot:
            pytest.fail(f"{where}: neither config.toml ({as_config}) nor bot.toml ({as_bot})")
        return
    assert settings is not None
