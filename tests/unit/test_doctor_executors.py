"""`atlas doctor` runs each executor config.toml turns on (`--version`) and says its version."""

from __future__ import annotations

from pathlib import Path

from atlas.doctor import run_checks
from tests.helpers import BASE_CONFIG, make_home
from tests.plugin_packages import PluginInstaller, plugin_installer  # noqa: F401

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
    aider = checks["executor aider"]
    assert not aider.ok and "no installed package registers it" in aider.detail
    assert "executor off" not in checks


OLD_EXECUTOR = """
class AiderExecutor:
    sdk_version = 1  # written for the SDK before this Atlas's
"""


async def test_doctor_names_the_sdk_version_of_an_older_executor_plugin(
    tmp_path: Path,
    plugin_installer: PluginInstaller,  # noqa: F811
) -> None:
    plugin_installer(
        name="atlas-aider",
        version="0.4.1",
        modules={"atlas_aider_old": OLD_EXECUTOR},
        entry_points={"atlas.executors": {"aider": "atlas_aider_old:AiderExecutor"}},
    )
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    make_home(tmp_path / "home", config=config + "\n[executors.aider]\nenabled = true\n")
    checks = {c.name: c for c in await run_checks(tmp_path / "home", offline=True)}
    aider = checks["executor aider"]
    assert not aider.ok and "atlas-aider==0.4.1" in aider.detail
    assert "SDK version 1, this Atlas speaks version 2" in aider.detail
    assert "no installed package registers it" not in aider.detail
