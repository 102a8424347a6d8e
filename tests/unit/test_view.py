"""The view's path rules (atlas/sandbox/view.py): links, `..`, /proc, case, hard links, grants,
and what `atlas doctor` says of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.sandbox.view import View, doctor_lines
from atlas.tools.files import read_file
from tests.helpers import make_home, run_context


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "person"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_rsa").write_text("KEY")
    monkeypatch.setenv("HOME", str(folder))
    return folder


def view_of(home: Home) -> View:
    return View.of(home, home.main_bot)


def test_a_link_in_the_workspace_into_the_home_is_not_followed(person: Path) -> None:
    home = make_home(person / ".atlas")
    workspace = home.main_bot.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    (person / ".ssh" / "link").symlink_to("/etc/hostname")  # inside a hidden folder
    (workspace / "key").symlink_to(person / ".ssh" / "id_rsa")
    (workspace / "through").symlink_to(person / ".ssh")
    view = view_of(home)
    assert not view.sees(view.resolve(workspace / "key"))
    # Not followed to /etc/hostname: the link lives where the bot cannot see.
    assert view.resolve(workspace / "through" / "link") == person / ".ssh" / "link"
    assert not view.sees(view.resolve(workspace / ".." / ".." / ".." / ".." / ".ssh" / "id_rsa"))
    assert view.sees(view.resolve(workspace / "new.txt"))


def test_proc_holds_no_process_and_no_kernel_memory(person: Path) -> None:
    view = view_of(make_home(person / ".atlas"))
    for raw in ("/proc/self/environ", "/proc/1/environ", "/proc/kcore", "/dev/fd/0", "/dev/stdin"):
        assert not view.sees(view.resolve(Path(raw))), raw
    assert view.sees(Path("/proc/cpuinfo")) and view.sees(Path("/etc/hostname"))


def test_case_cannot_slip_past_what_is_hidden_in_a_granted_home(person: Path) -> None:
    home = make_home(person / ".atlas")
    with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nreadable = ["~"]\n')
    view = view_of(Home(home.root))
    assert view.person_granted and view.sees(person / "notes.txt")
    assert not view.sees(person / ".SSH" / "id_rsa") and not view.sees(person / ".Ssh")


def test_a_readable_grant_through_a_link_in_the_workspace_is_dropped(person: Path) -> None:
    home = make_home(person / ".atlas")
    home.main_bot.workspace.mkdir(parents=True, exist_ok=True)
    (home.main_bot.workspace / "out").symlink_to(person / ".ssh")
    with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
        bot_toml.write('[sandbox]\nreadable = ["out"]\n')
    view = view_of(Home(home.root))
    assert view.readable == () and not view.sees(person / ".ssh" / "id_rsa")


async def test_a_hard_link_to_a_hidden_file_is_not_read(person: Path) -> None:
    home = make_home(person / ".atlas")
    run = run_context(home)
    run.bot.workspace.mkdir(parents=True, exist_ok=True)
    (person / "diary.txt").write_text("DIARY")  # in the emptied home: hidden
    os.link(person / "diary.txt", run.bot.workspace / "innocent.txt")
    result = await read_file.invoke(run, {"path": "innocent.txt"})
    assert result.is_error and "hard link" in result.text and "DIARY" not in result.text


def test_doctor_shows_each_bots_view(person: Path) -> None:
    home = make_home(person / ".atlas")
    ((name, ok, detail),) = doctor_lines(home)
    assert name == "view of atlas" and ok
    assert f"writable: {home.main_bot.workspace.resolve()}" in detail
    assert f"your home {person.resolve()} (empty but for grants)" in detail
