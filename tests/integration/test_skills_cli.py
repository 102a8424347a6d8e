"""`atlas skills import` brings a Claude Code skill in and says what did not map."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import make_home

SKILL = """---
name: pdf-fill
description: Fill PDF forms from a JSON file of field values.
allowed-tools: Read, Bash(python:*), NotebookEdit
---
Run scripts/fill.py with the form and the values.
"""


def test_import_maps_claude_code_tools_and_never_overwrites(
    home_path: Path, tmp_path: Path
) -> None:
    make_home(home_path)
    src = tmp_path / "pdf-fill"
    (src / "scripts").mkdir(parents=True)
    (src / "SKILL.md").write_text(SKILL)
    (src / "scripts" / "fill.py").write_text("print('filled')\n")
    env = {**os.environ, "ATLAS_HOME": str(home_path)}
    run = [sys.executable, "-m", "atlas.cli", "skills", "import", str(src)]
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=30)
    assert first.returncode == 0, first.stderr
    assert "Read → read_file" in first.stdout and "did not map: NotebookEdit" in first.stdout
    assert (home_path / "skills" / "pdf-fill" / "scripts" / "fill.py").exists()
    (home_path / "skills" / "pdf-fill" / "SKILL.md").write_text(SKILL + "\nmy own note\n")
    again = subprocess.run(run, env=env, capture_output=True, text=True, timeout=30)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert "my own note" in (home_path / "skills" / "pdf-fill" / "SKILL.md").read_text()
