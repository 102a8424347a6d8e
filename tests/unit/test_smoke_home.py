from pathlib import Path

from tests.helpers import run_context


def test_home_fixture_loads_main_bot(home) -> None:
    run = run_context(home)
    assert run.bot.name == "atlas"
    assert run.bot.workspace.is_dir()
    assert Path(home.root, "config.toml").exists()
