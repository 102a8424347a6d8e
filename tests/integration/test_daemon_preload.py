"""A single-process home loads its bots' model SDK and the TLS context before its channels
start (atlas/preload.py), in a thread: the first answer no longer pays 0.3-0.7 s for them on
the event loop (docs/benchmarks.md, "The first answer")."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import make_home


def test_the_sdk_is_loaded_before_the_channels_start(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    log = tmp_path / "daemon.log"
    env = {**os.environ, "ATLAS_HOME": str(home.root), "ATLAS_WORKERS": "1"}
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "atlas.cli", "-v", "run"], stdout=out, stderr=out, env=env
        )
    try:
        deadline = time.monotonic() + 60
        while "ready; stop with" not in log.read_text():
            assert daemon.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        daemon.terminate()
        daemon.wait(20)
    lines = log.read_text().splitlines()
    loaded = [n for n, line in enumerate(lines) if "model SDKs loaded in" in line]
    channels = [n for n, line in enumerate(lines) if "atlas.daemon: channels:" in line]
    assert loaded and channels, "\n".join(lines)
    assert loaded[0] < channels[0]
    assert not [line for line in lines if "Traceback" in line or " ERROR " in line]
