"""`atlas trust check` and `atlas trust log` as a person runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from atlas.store.home_db import GateRecord, HomeStore
from tests.helpers import BASE_CONFIG, make_home


def atlas(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATLAS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "atlas.cli", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=30,
    )


def test_trust_check_prints_the_verdict_without_running_anything(
    home_path: Path, tmp_path: Path
) -> None:
    make_home(
        home_path,
        config=BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
        + '\n[trust]\ndeny = ["terraform destroy*"]\n',
    )
    victim = tmp_path / "victim"
    victim.mkdir()
    out = atlas(home_path, "trust", "check", "--", f"rm -rf {victim}")
    assert out.returncode == 0 and out.stdout.startswith("guardian: dangerous")
    assert victim.exists()  # judged, never run
    blocked = atlas(home_path, "trust", "check", "--auto", "--json", "--", "rm -rf ~")
    assert json.loads(blocked.stdout)["verdict"] == "block"
    denied = json.loads(
        atlas(home_path, "trust", "check", "--json", "--", "terraform destroy -auto-approve").stdout
    )
    assert denied["verdict"] == "block" and denied["rule"] == "deny:terraform destroy*"
    assert atlas(home_path, "trust", "check", "--json", "--", "ls -la").stdout.startswith(
        '{"verdict": "allow"'
    )


async def test_trust_log_shows_recorded_decisions(home_path: Path) -> None:
    make_home(home_path)
    store = HomeStore(home_path / "atlas.db")
    await store.record_decision(
        GateRecord(
            "atlas",
            3,
            "conversation",
            "run_command",
            "ab12",
            '{"command": "gh pr create"}',
            "deny",
            "outside:gh",
            "the user denied it",
            "user",
        )
    )
    await store.close()
    out = atlas(home_path, "trust", "log")
    assert out.returncode == 0
    assert "atlas#3 run_command DENY [outside:gh] by user: the user denied it" in out.stdout
    row = json.loads(atlas(home_path, "trust", "log", "--json").stdout)
    assert row["verdict"] == "deny" and row["answered_by"] == "user"
