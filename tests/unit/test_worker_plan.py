"""Which process serves which bot (atlas/workers/plan.py), and what `atlas doctor` says of it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from atlas.doctor import _workers_check
from atlas.errors import ConfigError
from atlas.home import Home
from atlas.workers.plan import Placement, worker_count
from tests.helpers import make_home


def home_with_bots(root: Path, names: list[str], workers: int | None = None) -> Home:
    make_home(root)
    for name in names:
        folder = root / "bots" / name
        folder.mkdir(parents=True)
        (folder / "bot.toml").write_text(f'title = "{name}"\n')
        (folder / "MISSION.md").write_text("Help.\n")
    if workers is not None:
        with (root / "config.toml").open("a") as config:
            config.write(f"\n[daemon]\nworkers = {workers}\n")
    return Home(root)


def test_the_main_bot_is_in_the_home_process_and_the_others_go_round(tmp_path: Path) -> None:
    home = home_with_bots(tmp_path / "home", ["zeta", "alpha", "mid", "beta"])
    assert Placement.of(home, 1).shares == (("atlas", "alpha", "beta", "mid", "zeta"),)
    placement = Placement.of(home, 3)
    assert placement.shares == (("atlas", "mid"), ("alpha", "zeta"), ("beta",))
    assert [placement.owner(name) for name in ("atlas", "zeta", "beta")] == [0, 1, 2]


def test_the_count_comes_from_the_environment_the_config_or_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ATLAS_WORKERS")
    home = home_with_bots(tmp_path / "home", ["b1", "b2", "b3"], workers=3)
    assert worker_count(home, cores=8) == 3  # the config's
    monkeypatch.setenv("ATLAS_WORKERS", "2")
    assert worker_count(home, cores=8) == 2  # the environment wins
    monkeypatch.setenv("ATLAS_WORKERS", "64")
    assert worker_count(home) == 4  # never more than there are bots
    monkeypatch.setenv("ATLAS_WORKERS", "two")
    with pytest.raises(ConfigError, match="ATLAS_WORKERS='two'"):
        worker_count(home)
    monkeypatch.delenv("ATLAS_WORKERS")
    plain = home_with_bots(tmp_path / "other", ["b1", "b2", "b3"])
    assert worker_count(plain, cores=2) == 2  # one per core by default
    assert worker_count(plain, cores=1) == 1


def test_doctor_shows_the_plan_and_a_bad_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = home_with_bots(tmp_path / "home", ["b1", "b2"])
    monkeypatch.setenv("ATLAS_WORKERS", "2")
    check = _workers_check(home)
    assert (check.ok, check.detail) == (True, "2 processes: atlas, b2 | b1")
    monkeypatch.setenv("ATLAS_WORKERS", "0")
    check = _workers_check(home)
    assert not check.ok and "ATLAS_WORKERS='0'" in check.detail


def test_doctor_shows_one_process_for_a_home_on_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = home_with_bots(tmp_path / "home", ["b1", "b2"])
    with (home.root / "config.toml").open("a") as config:
        config.write('\n[store]\nurl = "postgresql://atlas@127.0.0.1:5432/atlas"\n')
    monkeypatch.setenv("ATLAS_WORKERS", "2")
    check = _workers_check(Home(home.root))
    assert (check.ok, check.detail) == (
        True,
        "1 process: atlas, b1, b2 (a home on PostgreSQL runs in one process for now)",
    )
    assert not caplog.records  # doctor says it in its line, not in a warning


def test_atlas_run_plans_one_process_for_a_home_on_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`[daemon] workers = 2` with a url: forced to one process at start, and said so."""
    from atlas.daemon import prepare

    monkeypatch.delenv("ATLAS_WORKERS")
    home = home_with_bots(tmp_path / "home", ["b1", "b2"], workers=2)
    assert prepare(home).placement.count == 2  # SQLite: as configured
    with (home.root / "config.toml").open("a") as config:
        config.write('\n[store]\nurl = "postgresql://atlas@127.0.0.1:5432/atlas"\n')
    with caplog.at_level(logging.WARNING, logger="atlas.workers.plan"):
        start = prepare(Home(home.root))
    assert start.placement.count == 1 and start.placement.shares == (("atlas", "b1", "b2"),)
    assert "workers: 1, not 2" in caplog.text
