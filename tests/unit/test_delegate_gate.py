"""The gate on delegate with an executor: a task's folder is judged as a place it writes in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlas.providers.base import ToolCall
from atlas.tools.delegate import delegate
from atlas.tools.fences import vault_of
from atlas.trust.gate import Allow, Ask, Deny, never_remembered
from atlas.trust.policy import RuleGate
from tests.helpers import make_home, run_context


@pytest.mark.parametrize(
    ("where", "expected", "rule"),
    [
        ("outside", Allow, "ordinary"),
        ("workspace", Allow, "ordinary"),
        ("vault", Deny, "files:vault"),
        ("system", Deny, "files:system"),
        ("home", Ask, "home:executor-folder"),
        ("around the home", Ask, "home:executor-folder"),
        ("person", Ask, "workbench:broad-folder"),
    ],
)
async def test_a_tasks_folder(tmp_path: Path, where: str, expected: type, rule: str) -> None:
    home = make_home(tmp_path / "home")
    run = run_context(home)
    folders = {
        "outside": str(tmp_path / "project"),
        "around the home": str(tmp_path),
        "workspace": str(run.bot.workspace),
        "vault": str(vault_of(home)),
        "system": "/etc",
        "home": str(home.root / "bots"),
        "person": str(Path.home()),
    }
    arguments = {"executor": "codex", "tasks": [{"goal": "x", "folder": folders[where]}]}
    call = ToolCall("c1", "delegate", json.dumps(arguments))
    decision = await RuleGate(home, None, None).decide(call, delegate, run)
    assert isinstance(decision, expected), decision
    if not isinstance(decision, Allow):
        assert decision.rule == rule
    if isinstance(decision, Ask):
        assert never_remembered(decision)
