"""`atlas run` as a process, against a home whose conversations.db is garbage: one clear
message on stderr naming the file and the way out, exit 2, no traceback, no file touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import make_home
from tests.integration.test_cli import hermetic_env


def test_atlas_run_with_a_garbage_database_says_which_and_how_to_recover(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_home(home)
    damaged = home / "bots" / "atlas" / "conversations.db"
    damaged.write_bytes(b"<html>502 Bad Gateway</html>\n" * 40)
    before = {p: p.stat().st_mtime_ns for p in home.rglob("*")}
    proc = subprocess.run(
        [sys.executable, "-m", "atlas.cli", "run"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=hermetic_env(home),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"atlas: {damaged} is damaged: it is not a SQLite database")
    assert f"sqlite3 {damaged} .recover" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in home.rglob("*")} == before
