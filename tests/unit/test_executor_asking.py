"""An executor task's permission requests: a hardline-blocked command is denied without asking,
any other is the person's (allow once or deny), and with nobody to ask it is denied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atlas.executors.base import Account, Decision, PermissionRequest
from atlas.executors.task_model import Origin, Task
from atlas.executors.tasks import ExecutorTasks
from atlas.executors.workbench import Instance
from tests.helpers import make_home
from tests.unit.trust_corpus import HARDLINE


class Harness:
    """Stands in for a running instance: keeps the answers it is given."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, Any]] = []

    async def answer(self, request_id: str, answer: Any) -> None:
        self.answers.append((request_id, answer))


def task_for(tmp_path: Path, ask: Any) -> Task:
    origin = Origin("atlas", 1, "conversation", ask=ask)
    account = Account("claude-code", "main", tmp_path / "cfg", main=True)
    return Task("ex-1", "goal", tmp_path, origin, None, object(), account)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "reply", "allowed", "asked"),
    [
        (HARDLINE[0], "allow once", False, False),  # blocked outright: never asked
        ("make deploy", "allow once", True, True),
        ("make deploy", "deny", False, True),
        ("make deploy", None, False, True),  # no answer: denied
    ],
)
async def test_permission_requests(
    tmp_path: Path, command: str, reply: str | None, allowed: bool, asked: bool
) -> None:
    questions: list[tuple[str, list[str]]] = []

    async def ask(question: str, choices: list[str]) -> str | None:
        questions.append((question, choices))
        return reply

    tasks = ExecutorTasks(make_home(tmp_path / "home"))
    task = task_for(tmp_path, ask)
    tasks.workbench.add(Instance("ex-1", "claude-code", "claude-code@main", tmp_path))
    harness = Harness()
    event = PermissionRequest("req-1", "Bash", {"command": command})
    await tasks._permission(task, harness, event, None)  # type: ignore[arg-type]
    [(request_id, decision)] = harness.answers
    assert request_id == "req-1" and isinstance(decision, Decision)
    assert decision.allow is allowed
    assert bool(questions) is asked
    if asked:
        assert questions[0][1] == ["allow once", "deny"]
        assert f"wants to use Bash: {command}" in questions[0][0]
    else:
        assert decision.message.startswith("refused by Atlas's rules:")
    assert tasks.workbench.get("ex-1").state == "running"  # type: ignore[union-attr]


async def test_with_nobody_to_ask_it_is_denied(tmp_path: Path) -> None:
    tasks = ExecutorTasks(make_home(tmp_path / "home"))
    harness = Harness()
    event = PermissionRequest("req-1", "Edit", {"file_path": "app.py"})
    await tasks._permission(task_for(tmp_path, None), harness, event, None)  # type: ignore[arg-type]
    [(_, decision)] = harness.answers
    assert not decision.allow and "nobody can approve" in decision.message
