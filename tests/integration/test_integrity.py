"""Damage inside a database, and a home Atlas cannot write, as a person meets them: `atlas run`,
`atlas chat` and `atlas search` refuse with the file and the way out (no traceback, nothing
changed); a healthy home is checked once, then remembered while its files stay the same;
doctor names a read-only home as read-only, not as damaged."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.store.damage import DamagedDatabase
from atlas.store.integrity import check_home, remember_clean_stop
from tests.helpers import make_home
from tests.integration.test_cli import hermetic_env


def filled_database(path: Path, rows: int = 3000) -> None:
    """A real conversations-like file, large enough to have pages in the middle."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("CREATE INDEX notes_body ON notes (body)")
    con.executemany(
        "INSERT INTO notes (body) VALUES (?)", [(f"note {n} " * 20,) for n in range(rows)]
    )
    con.commit()
    con.close()


def garble_the_middle(path: Path) -> None:
    """8 KiB of garbage in the middle: the header stays valid."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 8192] = os.urandom(8192)
    path.write_bytes(bytes(data))


def atlas(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlas.cli", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=hermetic_env(home),
        timeout=60,
    )


@pytest.mark.parametrize("argv", [("run",), ("search", "note"), ("chat",)])
def test_damage_in_the_middle_of_a_file_refuses_with_the_file_and_the_way_out(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    home = tmp_path / "home"
    make_home(home)
    damaged = home / "bots" / "atlas" / "conversations.db"
    filled_database(damaged)
    garble_the_middle(damaged)
    before = {p: p.stat().st_mtime_ns for p in home.rglob("*")}
    proc = atlas(home, *argv)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"atlas: {damaged} is damaged"), proc.stderr
    assert f"sqlite3 {damaged} .recover" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in home.rglob("*")} == before


def test_an_intact_file_is_checked_once_and_again_when_it_changes(tmp_path: Path) -> None:
    home_path = tmp_path / "home"
    make_home(home_path)
    db = home_path / "bots" / "atlas" / "conversations.db"
    filled_database(db)
    home = Home(home_path)
    check_home(home)  # checked, found intact, remembered
    # Garbled with its size and time kept: the remembered verdict stands (the cost saved).
    stat = db.stat()
    garble_the_middle(db)
    os.utime(db, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    check_home(home, budget=0.0)
    # A change Atlas did not make (its time moves): checked again, and refused.
    os.utime(db, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(DamagedDatabase, match="is damaged"):
        check_home(home)


def test_a_clean_stop_remembers_the_files_as_left(tmp_path: Path) -> None:
    home_path = tmp_path / "home"
    make_home(home_path)
    db = home_path / "atlas.db"
    filled_database(db)
    home = Home(home_path)
    check_home(home)
    with sqlite3.connect(db) as con:  # the daemon's own writes during its run
        con.execute("INSERT INTO notes (body) VALUES ('later')")
    remember_clean_stop(home)
    check_home(home, budget=0.0)  # nothing to check: no "unfinished" needed
    cache = (home_path / "run" / "integrity.json").read_text()
    assert str(db) in cache


BWRAP = shutil.which("bwrap")


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap is needed to mount the home read-only")
@pytest.mark.parametrize("command", ["doctor", "run"])
def test_a_read_only_home_is_named_read_only_not_damaged(tmp_path: Path, command: str) -> None:
    home = tmp_path / "home"
    make_home(home)
    filled_database(home / "atlas.db")
    argv = [sys.executable, "-m", "atlas.cli", command]
    argv += ["--offline"] if command == "doctor" else []
    proc = subprocess.run(
        [BWRAP, "--bind", "/", "/", "--dev", "/dev", "--ro-bind", str(home), str(home), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=hermetic_env(home),
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output
    assert "read-only file system" in output
    assert "damaged" not in output
