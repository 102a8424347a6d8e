"""A newcomer's first commands on a fresh home, as the README writes them."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_cli import run_atlas


def test_routines_list_on_a_fresh_home_says_how_to_load_the_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_atlas("init", "--home", str(home), home=None).code == 0
    done = run_atlas("routines", "list", home=home)
    assert done.code == 0, done.err
    # Not "add a file in routines/": init just put two there.
    assert "routines has 2 file(s): `atlas routines reload`" in done.out, done.out
    assert run_atlas("routines", "reload", home=home).code == 0
    assert "morning-briefing" in run_atlas("routines", "list", home=home).out
