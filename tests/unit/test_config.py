"""config.toml and bot.toml: the examples load, every setting is documented, errors say where."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from atlas.config import (
    BotSettings,
    ProviderSettings,
    Settings,
    load_bot_settings,
    load_settings,
)
from atlas.errors import AtlasError, ConfigError
from atlas.home import REPO_ROOT, Home, init_home
from atlas.providers.base import ProviderCallError
from atlas.providers.wire import PLACEHOLDER_API_KEY, api_key_for
from tests.helpers import BASE_CONFIG

EXAMPLE = REPO_ROOT / "config.example.toml"
BOT_TOMLS = sorted((REPO_ROOT / "bots").glob("*/bot.toml"))

# A header or a `key =` line, commented out or not: commented keys document optional settings.
HEADER = re.compile(r"^\s*#?\s*\[\s*([A-Za-z0-9_.-]+)\s*\]")
KEY = re.compile(r"^\s*#?\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")


def documented_keys(text: str) -> dict[str, set[str]]:
    """Keys by table ("" for the top level); every `[providers.x]` counts as "providers.*",
    every `[executors.x]` as "executors.*"."""
    keys: dict[str, set[str]] = {"": set()}
    table = ""
    for line in text.splitlines():
        if header := HEADER.match(line):
            table = re.sub(r"^(providers|executors)\.[^.]+$", r"\1.*", header.group(1))
            keys.setdefault(table, set())
        elif key := KEY.match(line):
            keys[table].add(key.group(1))
    return keys


def table_model(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("", Model) for a field that is a table, ("*", Model) for a dict of tables; else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "", annotation
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return "*", value
    return None


def undocumented(model: type[BaseModel], table: str, keys: dict[str, set[str]]) -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        nested = table_model(field.annotation)
        dotted = f"{table}.{name}" if table else name
        if nested is None:
            if name not in keys.get(table, set()):
                missing.append(dotted)
            continue
        suffix, submodel = nested
        sub_table = f"{dotted}.{suffix}" if suffix else dotted
        if sub_table not in keys:
            missing.append(f"[{sub_table}]")
        missing += undocumented(submodel, sub_table, keys)
    return missing


def write(tmp_path: Path, text: str | bytes, name: str = "config.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


# The examples


def test_config_example_loads_as_it_is() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.main == "atlas"
    assert settings.provider_for(settings.model)[0] in settings.providers


@pytest.mark.parametrize("path", BOT_TOMLS, ids=lambda p: p.parent.name)
def test_example_bot_tomls_load_as_they_are(path: Path) -> None:
    bot = load_bot_settings(path, load_settings(EXAMPLE))
    assert bot.title


def test_there_is_an_example_bot_for_the_main_agent() -> None:
    assert load_settings(EXAMPLE).main in {path.parent.name for path in BOT_TOMLS}


def test_a_home_made_from_the_examples_loads(tmp_path: Path) -> None:
    init_home(tmp_path / "home")
    home = Home(tmp_path / "home")
    assert home.main_bot.name == "atlas"
    assert home.main_bot.workspace.is_dir()


def test_every_setting_is_in_config_example() -> None:
    keys = documented_keys(EXAMPLE.read_text(encoding="utf-8"))
    missing = undocumented(Settings, "", keys)
    assert not missing, f"config.example.toml does not mention: {', '.join(missing)}"


def test_the_documentation_check_sees_a_missing_key() -> None:
    text = EXAMPLE.read_text(encoding="utf-8").replace("max_rounds", "max_roundz")
    assert "limits.max_rounds" in undocumented(Settings, "", documented_keys(text))


def test_a_commented_key_counts_as_documented() -> None:
    keys = documented_keys('[providers.openai]\nkind = "openai"\n# base_url = "x"\n')
    assert keys["providers.*"] == {"kind", "base_url"}


# Errors name the file, the key, its line and what was expected


def test_malformed_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'main = "atlas"\n\nmodel = \n')
    message = config_error(path)
    assert str(path) in message
    assert "malformed TOML" in message
    assert "line 3" in message


def test_unknown_key_names_file_dotted_key_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'main = "atlas"\n\n[limits]\nmax_rounds = 3\nmax_round = 3\n')
    message = config_error(path)
    assert str(path) in message
    assert "limits.max_round (line 5): unknown key" in message


def test_the_same_key_in_two_tables_is_found_in_the_right_one(tmp_path: Path) -> None:
    text = (
        '[providers.a]\nkind = "openai"\nmax_retries = 3\n\n'
        '[providers.b]\nkind = "openai"\nmax_retries = 99\n'
    )
    message = config_error(write(tmp_path, text))
    assert "providers.b.max_retries (line 7)" in message


def test_a_missing_key_points_at_its_table(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, 'model = "a/m"\n\n[providers.a]\nbase_url = "x"\n'))
    assert "providers.a.kind (line 3): required key is missing" in message


def test_api_key_in_config_points_to_api_key_env(tmp_path: Path) -> None:
    path = write(tmp_path, '[providers.openai]\nkind = "openai"\napi_key = "sk-not-here"\n')
    message = config_error(path)
    assert "providers.openai.api_key (line 3): unknown key" in message
    assert "api_key_env" in message
    assert "environment variable" in message


def test_wrong_type_names_key_line_and_what_was_expected(tmp_path: Path) -> None:
    path = write(tmp_path, 'main = "atlas"\n[limits]\nmax_rounds = "many"\n')
    message = config_error(path)
    assert str(path) in message
    assert "limits.max_rounds (line 3)" in message
    assert "valid integer" in message
    assert "'many'" in message


def test_out_of_range_value_says_the_bound(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "[limits]\nmax_rounds = 0\n"))
    assert "limits.max_rounds (line 2)" in message
    assert "greater than or equal to 1" in message


def test_unknown_timezone(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, 'timezone = "Mars/Olympus_Mons"\n'))
    assert "timezone (line 1)" in message
    assert "unknown time zone 'Mars/Olympus_Mons'" in message
    assert "Value error" not in message  # pydantic's wrapper is not for people


def test_model_with_undefined_provider_in_config(tmp_path: Path) -> None:
    path = write(tmp_path, 'main = "atlas"\nmodel = "nope/some-model"\n')
    message = config_error(path)
    assert str(path) in message
    assert "model (line 2)" in message
    assert "'nope'" in message
    assert "[providers.nope]" in message


def test_fallback_and_guardian_models_need_defined_providers(tmp_path: Path) -> None:
    base = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    fallback = config_error(write(tmp_path, 'fallback_model = "gone/m"\n' + base))
    assert "fallback_model (line 1)" in fallback
    assert "'gone'" in fallback
    guardian = config_error(write(tmp_path, base + '\n[trust]\nguardian_model = "gone/m"\n'))
    assert "trust.guardian_model" in guardian
    assert "'gone'" in guardian


def test_model_with_undefined_provider_in_bot_toml(home_path: Path) -> None:
    init_home(home_path)
    (home_path / "config.toml").write_text(BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1"))
    bot_toml = home_path / "bots" / "atlas" / "bot.toml"
    bot_toml.write_text('title = "Atlas"\nmodel = "elsewhere/big-model"\n')
    with pytest.raises(ConfigError) as info:
        Home(home_path)
    message = str(info.value)
    assert str(bot_toml) in message
    assert "model (line 2)" in message
    assert "'elsewhere'" in message


def test_unknown_key_in_bot_toml(tmp_path: Path) -> None:
    path = write(tmp_path, 'title = "x"\nauto = true\n', name="bot.toml")
    with pytest.raises(ConfigError) as info:
        load_bot_settings(path)
    assert f"{path}: invalid settings" in str(info.value)
    assert "auto (line 2): unknown key" in str(info.value)


def test_bot_folder_with_a_bad_name(home_path: Path) -> None:
    init_home(home_path)
    bad = home_path / "bots" / "Bad Name"
    bad.mkdir()
    shutil.copy(home_path / "bots" / "atlas" / "bot.toml", bad / "bot.toml")
    with pytest.raises(ConfigError) as info:
        Home(home_path)
    assert str(bad) in str(info.value)
    assert "'Bad Name' is not allowed" in str(info.value)


def test_a_folder_without_bot_toml_is_not_a_bot(home_path: Path) -> None:
    init_home(home_path)
    (home_path / "bots" / "Not A Bot").mkdir()
    assert list(Home(home_path).bots) == ["atlas"]


def test_main_bot_missing(home_path: Path) -> None:
    init_home(home_path)
    shutil.rmtree(home_path / "bots" / "atlas")
    with pytest.raises(ConfigError) as info:
        Home(home_path)
    message = str(info.value)
    assert str(home_path / "config.toml") in message
    assert "main = 'atlas'" in message
    assert str(home_path / "bots" / "atlas" / "bot.toml") in message


@pytest.mark.parametrize("name", ["config.toml", "bot.toml"])
def test_file_not_utf8(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, b'title = "caf\xe9"\n', name=name)
    with pytest.raises(ConfigError) as info:
        (load_settings if name == "config.toml" else load_bot_settings)(path)
    assert str(path) in str(info.value)
    assert "not UTF-8" in str(info.value)


def test_missing_home_says_to_run_atlas_init(tmp_path: Path) -> None:
    with pytest.raises(AtlasError) as info:
        Home(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(info.value)
    assert "atlas init" in str(info.value)


# Secrets come from the environment variable named in api_key_env, and from nowhere else


def test_key_is_read_from_the_named_variable_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-sdk-default")
    provider = ProviderSettings(kind="openai", api_key_env="MY_OPENAI_KEY")
    assert provider.api_key() is None
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-named")
    assert provider.api_key() == "sk-named"
    assert api_key_for("openai", provider) == "sk-named"


def test_without_api_key_env_no_key_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-sdk-default")
    provider = ProviderSettings(kind="openai", base_url="http://127.0.0.1:11434/v1")
    assert provider.api_key() is None
    # The SDK would read OPENAI_API_KEY itself if given no key; it is given a placeholder.
    assert api_key_for("local", provider) == PLACEHOLDER_API_KEY


def test_a_named_but_unset_variable_is_an_error_naming_it() -> None:
    provider = ProviderSettings(kind="anthropic", api_key_env="ATLAS_TEST_UNSET_KEY")
    with pytest.raises(ProviderCallError, match="ATLAS_TEST_UNSET_KEY"):
        api_key_for("anthropic", provider)


def test_settings_hold_no_secret_values() -> None:
    fields = set(ProviderSettings.model_fields) | set(BotSettings.model_fields)
    assert not {"api_key", "token", "secret", "password"} & fields
