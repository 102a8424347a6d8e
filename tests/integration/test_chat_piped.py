"""`atlas chat` fed by a pipe, as a script would: each prompt on its own line, a failed turn
told once (no WARNING log after the reply), one period, and exit code 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import make_home


def test_piped_chat_with_an_unreachable_provider(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_home(home)  # the provider on a closed loopback port
    done = subprocess.run(
        [sys.executable, "-m", "atlas.cli", "chat"],
        input=b"hello\nsecond\n",
        capture_output=True,
        env={**os.environ, "ATLAS_HOME": str(home), "OPENAI_API_KEY": "x"},
        timeout=60,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    lines = out.splitlines()
    assert "you> hello" in lines, out  # the piped line echoed after its prompt
    assert "you> second" in lines, out
    replies = [line for line in lines if line.startswith("atlas> ")]
    assert len(replies) == 2, out
    assert all(r.startswith("atlas> Sorry, I could not answer") for r in replies)
    assert "connection failed" in replies[0], replies[0]  # refused, not "timed out"
    assert ".." not in out, out
    assert "turn failed" not in err and "WARNING" not in err, err  # said once, in the reply
    assert done.returncode == 1, (out, err)


def test_piped_chat_that_answers_exits_0(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_home(home)
    done = subprocess.run(
        [sys.executable, "-m", "atlas.cli", "chat"],
        input=b"/exit\n",
        capture_output=True,
        env={**os.environ, "ATLAS_HOME": str(home)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "you> /exit" in done.stdout.decode()
