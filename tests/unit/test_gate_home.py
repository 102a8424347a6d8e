"""The gate's file rules: the Atlas home outside the bot's workspace is asked or refused, memory
and skills change only through their own tools, attach_file is fenced like read_file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atlas.providers.base import ToolCall
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext
from atlas.trust.gate import ALLOW_CONVERSATION, ALLOW_ONCE, DENY, Allow, Deny, settle
from atlas.trust.policy import RuleGate
from tests.helpers import Person, make_home, run_context

REGISTRY = default_registry()


@pytest.fixture
def run(home_path: Path) -> RunContext:
    run = run_context(make_home(home_path))  # bots/helper/… below: another bot's paths
    run.bot.workspace.mkdir(parents=True, exist_ok=True)
    return run


async def judge(run: RunContext, tool: str, **args: object) -> Allow | Deny:
    gate = RuleGate(run.home, None, None)
    return await settle(gate, ToolCall("c1", tool, json.dumps(args)), REGISTRY.get(tool), run)


def write_args(tool: str) -> dict[str, object]:
    if tool == "edit_file":
        return {"old_string": "a", "new_string": "b"}
    return {"content": "x"} if tool == "write_file" else {}


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
async def test_memory_and_skills_change_only_through_their_tools(
    run: RunContext, tool: str
) -> None:
    home, bot = run.home.root, run.bot.root
    run.ask = Person(ALLOW_ONCE)  # no question is put: these are refused outright
    for path, names in (
        (bot / "memory" / "MEMORY.md", "`memory`"),
        (home / "bots" / "helper" / "memory" / "USER.md", "`memory`"),
        (home / "USER.md", "`memory`"),
        (bot / "skills" / "x" / "SKILL.md", "`skill_manage`"),
        (home / "skills" / "y" / "SKILL.md", "`skill_manage`"),
        (run.bot.workspace / ".." / "memory" / "MEMORY.md", "`memory`"),  # `..` resolved
    ):
        decision = await judge(run, tool, path=str(path), **write_args(tool))
        assert isinstance(decision, Deny) and names in decision.reason, path
    assert not run.ask.asked  # type: ignore[union-attr]


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
async def test_settings_and_databases_are_never_written(run: RunContext, tool: str) -> None:
    home = run.home.root
    for path in (
        home / "config.toml",
        home / "mcp.json",
        home / "models.toml",
        home / "atlas.db",
        home / "atlas.db-wal",
        home / "bots" / "atlas" / "bot.toml",
        home / "bots" / "helper" / "bot.toml",
        home / "bots" / "atlas" / "conversations.db",
    ):
        decision = await judge(run, tool, path=str(path), **write_args(tool))
        assert isinstance(decision, Deny) and decision.answered_by == "rule", path


async def test_the_rest_of_the_home_is_asked_every_time(run: RunContext) -> None:
    home = run.home.root
    person = Person(ALLOW_CONVERSATION)
    run.ask = person
    for tool, path in (
        ("write_file", home / "bots" / "atlas" / "MISSION.md"),
        ("write_file", home / "routines" / "nightly.toml"),
        ("read_file", home / "config.toml"),
        ("read_file", home / "bots" / "atlas" / "bot.toml"),
        ("read_file", home / "bots" / "helper" / "memory" / "MEMORY.md"),  # another bot's
        ("read_file", home / "bots" / "helper" / "workspace" / "notes.txt"),
        ("find_files", home),
        ("find_files", home / "bots"),
        ("attach_file", home / "atlas.db"),
    ):
        args = {"pattern": "x"} if tool == "find_files" else write_args(tool)
        before = len(person.asked)
        for _ in range(2):  # "allow for this conversation" is neither offered nor kept
            decision = await judge(run, tool, path=str(path), **args)
            assert isinstance(decision, Allow) and decision.answered_by == "user", path
        assert len(person.asked) == before + 2, path
        question, choices = person.asked[-1]
        assert str(path.resolve()) in question and choices == [ALLOW_ONCE, DENY]
    assert not run.state.approvals


async def test_own_notes_skills_and_what_atlas_points_to_are_read_freely(
    run: RunContext,
) -> None:
    home, bot = run.home.root, run.bot.root
    run.ask = Person(DENY)
    for tool, path in (
        ("read_file", bot / "memory" / "MEMORY.md"),
        ("read_file", bot / "skills" / "x" / "SKILL.md"),
        ("read_file", home / "skills" / "shared" / "SKILL.md"),
        ("read_file", home / "spill" / "atlas" / "1" / "c1.txt"),
        ("read_file", home / "commands" / "abc.log"),
        ("attach_file", bot / "memory" / "USER.md"),
        ("read_file", run.bot.workspace / "notes.txt"),
    ):
        assert isinstance(await judge(run, tool, path=str(path)), Allow), path
    assert not run.ask.asked  # type: ignore[union-attr]


async def test_attach_file_never_reaches_the_vault(run: RunContext) -> None:
    vault = run.home.root / "vault"
    vault.mkdir()
    (vault / "key.txt").write_text("s3cret")
    (run.bot.workspace / "innocent").symlink_to(vault)
    for path in (str(vault / "key.txt"), "innocent/key.txt"):
        decision = await judge(run, "attach_file", path=path)
        assert isinstance(decision, Deny) and decision.rule == "files:vault", path


async def test_the_tool_opens_the_path_the_gate_judged(run: RunContext) -> None:
    """The gate's resolution is handed to the tool (one lookup): a link retargeted after the
    check is refused at open time, not followed (see test_file_fences for the vault)."""
    ws = run.bot.workspace
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("first\n")
    (ws / "link").symlink_to(ws / "real")
    assert isinstance(await judge(run, "read_file", path="link/a.txt"), Allow)
    (ws / "other").mkdir()
    (ws / "other" / "a.txt").write_text("second\n")
    (ws / "link").unlink()
    (ws / "link").symlink_to(ws / "other")
    result = await REGISTRY.call(run, "read_file", {"path": "link/a.txt"})
    assert not result.is_error and "first" in result.text  # what was judged, not the new target


async def test_a_home_under_a_system_folder_keeps_its_workspace_writable(
    run: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atlas.trust import policy

    system = run.home.root.parent  # stands for /var or /opt, where a home may live
    monkeypatch.setattr(policy, "SYSTEM_ROOTS", (system,))
    assert isinstance(await judge(run, "write_file", path="notes.md", content="x"), Allow)
    outside = await judge(run, "write_file", path=str(system / "x.conf"), content="x")
    assert isinstance(outside, Deny) and outside.rule == "files:system"
