"""Every always-on tool's schema stays small: it is paid for in every request."""

import json
import subprocess
import sys
from pathlib import Path

from scripts.measure_tools import ROSTER_CEILING, TOOL_CEILING, measure

ROOT = Path(__file__).resolve().parents[2]


def test_each_tool_and_the_roster_stay_under_their_ceilings() -> None:
    figures = measure()
    assert figures["always_on"], "no always-on tools were measured"
    for name, tokens in figures["always_on"].items():
        assert 20 < tokens < TOOL_CEILING, f"{name}: {tokens} tokens"
    assert figures["total"] == sum(figures["always_on"].values())
    assert figures["total"] < ROSTER_CEILING


def test_script_prints_json() -> None:
    out = subprocess.run(
        [sys.executable, "scripts/measure_tools.py", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = json.loads(out)
    assert set(figures["always_on"]) >= {"run_command"}
