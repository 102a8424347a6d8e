"""The delegation record end to end: delegate runs the fake `claude` in the sandbox (a question
the person answers, then a resume that writes a file), the daemon's services write every turn
into atlas.db, and delegation_search reads it back with the harness's own session log;
executor_accounts tells what the runs showed of each account."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from atlas.agents.services import HomeServices
from atlas.home import Home
from atlas.tools.delegation_search import delegation_search
from atlas.tools.executors import executor_accounts
from atlas.tools.registry import RunContext

# The same home (fake claude and codex, two claude accounts), services and folders.
from tests.integration.test_delegate_executors import (  # noqa: F401 (fixtures)
    Desk,
    call,
    chat,
    commit_a_file,
    ended,
    folders,
    home,
    scenario,
    services,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


async def search(run: RunContext, **arguments: object) -> str:
    result = await delegation_search.invoke(run, arguments)
    assert not result.is_error, result.text
    return result.text


async def test_a_task_and_its_resume_are_recorded_and_read_back(
    home: Home,  # noqa: F811 (the fixtures above)
    services: HomeServices,  # noqa: F811
    folders: dict[str, Path],  # noqa: F811
) -> None:
    project = folders["project"]
    commit_a_file(project)
    scenario(folders["claude-main"], "question")
    desk = Desk(choose="postgres")
    run = chat(home, services, desk)
    await call(run, executor="claude-code", tasks=[{"goal": "set up a db", "folder": str(project)}])
    [instance] = await ended(services, desk)
    scenario(folders["claude-main"], "success")
    await call(run, action="resume", subagent_id=instance.id, message="write the notes")
    await ended(services, desk, count=2)
    session = services.workbench.get(instance.id).session_id  # type: ignore[union-attr]
    assert session

    text = await search(run, instance_id=instance.id)
    turn1, turn2 = text.split("Turn 1 ", 1)[1].split("Turn 2 ", 1)
    assert f"· done · session {session}" in turn1  # the id the harness gave, off the workbench
    assert "[prompt] set up a db" in turn1
    assert "[question] Which database?" in turn1
    assert "[answer by pat] Which database?: postgres" in turn1
    assert "[final] Set up postgres." in turn1
    assert "[usage] 120 in, 45 out tokens, $0.0123" in turn1
    assert f"session {session}" in turn2  # the resume went on in the same session
    assert "[prompt] write the notes" in turn2
    assert "[files] changed: fake-claude-output.txt" in turn2
    assert "[git diff --stat after]\n    fake-claude-output.txt (new)" in turn2
    log = text.split("claude-code's own session log", 1)[1]
    assert "tools left out" in log and "Done: write the notes" in log

    found = await search(run, query="postgres")
    assert found.split("\n\n")[1].startswith(f"## {instance.id} · claude-code@main")
    assert instance.id in await search(run)

    Path(log.split(", ", 1)[1].split(")", 1)[0]).unlink()  # the harness cleaned it up
    gone = await search(run, instance_id=instance.id)
    assert f"claude-code's own session log (session {session}) is gone" in gone
    assert "[answer by pat] Which database?: postgres" in gone


async def test_executor_accounts_tells_what_the_recorded_runs_showed(
    home: Home,  # noqa: F811 (the fixtures above)
    services: HomeServices,  # noqa: F811
    folders: dict[str, Path],  # noqa: F811
) -> None:
    """The main account hits its plan's limit mid-task and the work account goes on: with no
    model call, executor_accounts then says which is at its limit until when, and each one's
    usage per window as the harness's events told it."""
    scenario(folders["claude-main"], "limit")
    profile = {"oauthAccount": {"emailAddress": "me@work.example"}}
    (folders["claude-work"] / ".claude.json").write_text(json.dumps(profile))
    desk = Desk()
    run = chat(home, services, desk)
    await call(
        run,
        executor="claude-code",
        tasks=[{"goal": "refactor", "folder": str(folders["project"])}],
        route=["claude-code@work"],
    )
    [instance] = await ended(services, desk)
    result = await executor_accounts.invoke(run, {"executor": "claude-code"})
    assert not result.is_error, result.text
    main, work = result.text.split("claude-code@work\n", 1)
    assert main.startswith("claude-code@main (main)")
    assert "five_hour: 100% used, rejected, resets " in main
    assert "at its limit: yes (until " in main
    assert "logged in as: me@work.example" in work
    assert "seven_day: 80% used, warning, resets " in work and "at its limit: no" in work
    assert "in this order: claude-code@main, claude-code@work" in work

    # The record keeps both turns: the one that hit the limit, and the one that went on.
    text = await search(run, instance_id=instance.id)
    turn1, turn2 = text.split("Turn 1 ", 1)[1].split("Turn 2 ", 1)
    assert turn1.startswith("· claude-code@main") and " · limit · " in turn1
    assert "[error] You've hit your session limit" in turn1
    assert turn2.startswith("· claude-code@work") and " · done · " in turn2
