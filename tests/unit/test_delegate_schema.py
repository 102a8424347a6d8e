"""delegate's description names the executors' targets only where one is turned on, and its
schema stays under the per-tool ceiling either way."""

from __future__ import annotations

from pathlib import Path

from atlas.tools.delegate import delegate
from scripts.measure_tools import TOOL_CEILING, tool_tokens
from tests.helpers import BASE_CONFIG, make_home, run_context

EXECUTORS = """
[executors.claude-code]
enabled = true
accounts = { main = "~/.claude", work = "~/.claude-work" }

[executors.codex]
enabled = true
"""


def test_the_executor_paragraph_is_there_only_with_an_executor(tmp_path: Path) -> None:
    base = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    plain = run_context(make_home(tmp_path / "plain", config=base))
    assert delegate.spec(plain).description == delegate.description
    with_executors = run_context(make_home(tmp_path / "exec", config=base + EXECUTORS))
    described = delegate.spec(with_executors).description
    assert "With an executor (claude-code@main, claude-code@work, codex):" in described
    assert tool_tokens(delegate.spec(with_executors)) < TOOL_CEILING


async def test_executor_parameters_are_shown_only_with_an_executor(tmp_path: Path) -> None:
    base = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    plain = run_context(make_home(tmp_path / "plain", config=base))
    shown = delegate.spec(plain).parameters
    assert {"executor", "route", "account"}.isdisjoint(shown["properties"])
    assert "folder" not in shown["properties"]["tasks"]["items"]["properties"]
    assert shown["properties"]["action"]["enum"] == ["spawn", "list", "steer", "stop", "answer"]
    with_executors = run_context(make_home(tmp_path / "exec", config=base + EXECUTORS))
    full = delegate.spec(with_executors).parameters
    assert {"executor", "route", "account"} <= set(full["properties"])
    assert "folder" in full["properties"]["tasks"]["items"]["properties"]
    assert {"resume", "account"} <= set(full["properties"]["action"]["enum"])
    # Sent anyway where there is none, the answer says what to turn on.
    answer = await delegate.invoke(plain, {"tasks": [{"goal": "x"}], "executor": "codex"})
    assert answer.is_error and "no executor is turned on" in answer.text
