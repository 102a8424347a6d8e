"""The view's path rules (atlas/sandbox/view.py): links, `..`, /proc, case, hard links, grants,
and what `atlas doctor` says of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from atlas.errors import ToolError
from atlas.home import Home
from atlas.sandbox.view import PROC_READABLE, View, doctor_lines
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


def sees_by_every_rule(view: View, path: Path) -> bool:
    """The view's answer as it was computed before (atlas/sandbox/view.py): every hidden path
    compared with the path, case-folded; then /proc; then the emptied home and its grants."""
    text = str(path)
    folded = text.casefold()
    rules = {str(p).casefold().rstrip("/") or "/" for p in view.hidden}
    if any(folded == f or folded.startswith(f + "/") or f == "/" for f in rules):
        return False
    if text == "/proc" or text.startswith("/proc/"):
        return text == "/proc" or (text.count("/") == 2 and path.name in PROC_READABLE)
    person = str(view.person)
    if view.person_granted or not text.startswith(person + "/"):
        return True
    bound = [str(p) for p in (view.workspace, *view.writable, *view.readable, *view.runtime,
                              view.atlas_home, view.vault)]  # fmt: skip
    return any(text == b or text.startswith(b + "/") or b.startswith(text + "/") for b in bound)


@pytest.mark.parametrize("granted", [False, True])
def test_the_prefix_lookup_answers_as_every_rule_did(person: Path, granted: bool) -> None:
    home = make_home(person / ".atlas")
    if granted:  # the whole home granted: only the hidden paths stand between a tool and them
        with (home.main_bot.root / "bot.toml").open("a") as bot_toml:
            bot_toml.write('[sandbox]\nreadable = ["~"]\nhidden = ["~/Private", "~/notes/x"]\n')
        home = Home(home.root)
    view = view_of(home)
    workspace = home.main_bot.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    (person / ".config" / "gh").mkdir(parents=True)
    (person / ".config" / "gh" / "hosts.yml").write_text("token")
    (person / "Private").mkdir()
    (workspace / "to-ssh").symlink_to(person / ".ssh")
    (workspace / "to-home").symlink_to("../../../..")
    (workspace / "loop").symlink_to("loop")
    (person / "ok.txt").write_text("fine")
    table = [
        "/", "/etc/hostname", "/proc", "/proc/self", "/proc/self/environ", "/proc/cpuinfo",
        "/proc/1/environ", "/run", "/run/docker.sock", "/var/run/x", "/runner", "/tmp/x",
        str(person), f"{person}/ok.txt", f"{person}/.ssh", f"{person}/.ssh/id_rsa",
        f"{person}/.SSH/id_rsa", f"{person}/.Ssh", f"{person}/.sshx", f"{person}/.ssh/../ok.txt",
        f"{person}/.config", f"{person}/.config/gh/hosts.yml", f"{person}/.CONFIG/GH",
        f"{person}/.config/ghost", f"{person}/Private/a", f"{person}/private", f"{person}/notes",
        f"{person}/notes/x/y", f"{person}/notes/xy", f"{person}/.atlas", str(workspace),
        f"{workspace}/a.txt", f"{workspace}/to-ssh/id_rsa", f"{workspace}/to-home/ok.txt",
        f"{workspace}/to-home/.ssh/id_rsa", f"{workspace}/../workspace/a.txt",
        f"{workspace}/sub/../../workspace/a.txt", f"{workspace}/./a.txt",
    ]  # fmt: skip
    answers = []
    for raw in table:
        path = Path(raw)
        resolved = view.resolve(path)
        assert view.sees(path) == sees_by_every_rule(view, path), raw
        assert view.sees(resolved) == sees_by_every_rule(view, resolved), raw
        answers.append(view.sees(resolved))
    expected = dict(zip(table, answers, strict=True))
    # What the rules must say, whichever way they are looked up.
    for raw in (f"{person}/.ssh/id_rsa", f"{person}/.SSH/id_rsa", f"{workspace}/to-ssh/id_rsa",
                f"{person}/.config/gh/hosts.yml", "/run/docker.sock", "/proc/self/environ",
                f"{workspace}/to-home/.ssh/id_rsa", f"{person}/Private/a" if granted else "/run"):  # fmt: skip
        assert expected[raw] is False, raw
    for raw in ("/etc/hostname", "/proc/cpuinfo", "/runner", f"{workspace}/a.txt",
                f"{person}/.config/ghost" if granted else f"{workspace}/./a.txt",
                f"{person}/notes/xy" if granted else "/"):  # fmt: skip
        assert expected[raw] is True, raw
    assert expected[f"{person}/ok.txt"] is granted  # the emptied home, unless granted
    with pytest.raises(ToolError):
        view.resolve(workspace / "loop")
