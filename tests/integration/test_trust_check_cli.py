"""`atlas trust check`, the real command: its exit code is the verdict's (0 allow, 1 block,
3 ask, 4 guardian; 2 without a command), so a script can act on it (it was 0 on "block")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("words", "code", "verdict"),
    [
        (["--", "ls -la"], 0, "allow"),
        (["--", "rm -rf /"], 1, "block"),
        (["--", "gh pr create"], 3, "ask"),
        (["--", "rm -rf build"], 4, "guardian"),
        ([], 2, ""),
    ],
)
def test_the_exit_code_is_the_verdicts(
    tmp_path: Path, words: list[str], code: int, verdict: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "atlas.cli", "trust", "check", "--home", str(tmp_path), *words],
        capture_output=True,
        text=True,
        env={**os.environ, "ATLAS_HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout.startswith(f"{verdict}: ") if verdict else "no command" in done.stdout
