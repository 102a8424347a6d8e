"""`atlas doctor` runs each executor config.toml turns on (`--version`) and says its version."""

from __future__ import annotations

from pathlib import Path

from atlas.doctor import run_checks
from tests.helpers import BASE_CONFIG, make_home

FAKES = Path(__file__).resolve().parents[1] / "fakes"


async def test_doctor_reports_each_enabled_executor(tmp_path: Path) -> None:
    config = (
        BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
        + f"""
[executors.claude-code]
enabled = true
binary = "{FAKES / "fake_claude.py"}"

[executors.codex]
enabled = true
binary = "{tmp_path / "no-codex-here"}"

[executors.aider]
enabled = true

[executors.off]
enabled = false
"""
    )
    make_home(tmp_path / "home", config=config)
    checks = {c.name: c for c in await run_checks(tmp_path / "home", offline=True)}
    claude = checks["executor claude-code"]
    assert claude.ok and claude.detail.endswith("2.1.197 (Claude Code)")
    codex = checks["executor codex"]
    assert not codex.ok and "not found" in codex.detail
    assert "npm install -g @openai/codex" in codex.fix
    assert not checks["executor aider"].ok  # no package registers it
    assert "executor off" not in checks
