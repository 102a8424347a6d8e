"""`atlas budget`: the fixed per-request cost, by section and by tool."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import make_home


def test_budget_lists_sections_tools_and_the_heaviest(home_path: Path) -> None:
    home = make_home(home_path)
    (home.bot(None).memory_dir / "MEMORY.md").write_text("The user likes terse answers. " * 20)
    env = {**os.environ, "ATLAS_HOME": str(home_path)}
    out = subprocess.run(
        [sys.executable, "-m", "atlas.cli", "budget"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    total = int(re.search(r"every request: ([\d,]+) tokens", lines[0]).group(1).replace(",", ""))
    parts = [
        int(line.rsplit(": ", 1)[1].replace(",", "")) for line in lines if line.startswith("  ")
    ]
    assert total == sum(parts) and total > 1000
    assert "  memory: MEMORY.md: " in out.stdout and "  run_command: " in out.stdout
    items = {
        line.strip().rsplit(": ", 1)[0]: int(line.rsplit(": ", 1)[1].replace(",", ""))
        for line in lines
        if line.startswith("  ")
    }
    heaviest = max(items, key=items.__getitem__)
    assert lines[-1].startswith(f"Heaviest: {heaviest} ({items[heaviest]:,})")
