"""The tool list asked for before every model call (ToolRegistry.specs_for_run): each tool's
availability decided once per pass, never remembered from one round to the next, and the list
always the one built without any reuse."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.providers.base import ToolSpec
from atlas.tools import skills as skills_module
from atlas.tools.registry import RunContext, Tool, ToolRegistry, _arguments_schema, tool
from atlas.tools.skills import use_skill
from atlas.tools.tool_search import TOOL_SEARCH_TOOLS, deferred_tools, registry_for
from tests.helpers import run_context
from tests.unit.test_tool_search import services_over

SWITCH = {"radio": True}


@pytest.fixture(autouse=True)
def skills_looked_at_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests change the skills folders between rounds: no wait between looks."""
    monkeypatch.setattr(skills_module, "SKILLS_RECHECK_SECONDS", 0.0)


ASKED: list[str] = []


def _radio_rule(run: RunContext) -> str | None:
    ASKED.append("radio")
    return None if SWITCH["radio"] else "not available: the radio is off"


@tool(deferred=True, read_only=True, available=_radio_rule)
async def radio(run: RunContext, station: str) -> str:
    """Play a radio station."""
    return station


@tool(read_only=True, describe=lambda run: f"Say hello in conversation {run.conversation_id}.")
async def hello(run: RunContext) -> str:
    """Say hello."""
    return "hello"


def _uncached(registry: ToolRegistry, run: RunContext) -> list[ToolSpec]:
    """The tool list as it was built before specs were reused and answers shared in a pass."""
    listed = [t for t in registry if not t.deferred]
    listed += [t for name in run.state.loaded_tools if (t := registry.get(name)) is not None]
    return [
        ToolSpec(t.name, t.describe(run) if t.describe else t.description, _fresh_schema(t, run))
        for t in listed
        if t._unavailable_reason(run) is None
    ]


def _fresh_schema(t: Tool, run: RunContext) -> dict:  # type: ignore[type-arg]
    hidden = t.hidden | (t.withheld(run) if t.withheld else frozenset())
    return _arguments_schema.__wrapped__(t.arguments, hidden, t.required)  # type: ignore[attr-defined]


def test_the_list_equals_the_uncached_one_as_the_run_changes(home: Home) -> None:
    """The built-in tools, over rounds in which a deferred tool loads, the mode turns
    read-only, a skill appears and the conversation changes."""
    run = run_context(home)
    registry = registry_for(run)
    assert registry.specs_for_run(run) == _uncached(registry, run)
    run.state.loaded_tools.append("plan")
    assert registry.specs_for_run(run) == _uncached(registry, run)
    run.state.mode = "read-only"
    assert registry.specs_for_run(run) == _uncached(registry, run)
    folder = run.home.skills_dir / "greet"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: greet\ndescription: Greets.\n---\nSay hi.\n")
    _touch_later(run.home.skills_dir)
    assert registry.specs_for_run(run) == _uncached(registry, run)
    other = run_context(home, conversation_id=2, kind="routine")
    assert registry.specs_for_run(other) == _uncached(registry, other)
    assert [t.name for t in registry.for_run(run)] == [s.name for s in registry.specs_for_run(run)]


def test_a_described_spec_is_reused_only_while_its_description_holds(home: Home) -> None:
    registry = ToolRegistry([hello])
    first = registry.specs_for_run(run_context(home, conversation_id=1))
    assert registry.specs_for_run(run_context(home, conversation_id=1))[0] is first[0]
    second = registry.specs_for_run(run_context(home, conversation_id=2))
    assert second[0].description == "Say hello in conversation 2."
    assert first[0].description == "Say hello in conversation 1."
    assert hello.spec().description == "Say hello."  # without a run: the docstring


def test_availability_is_asked_once_per_pass_and_again_every_round(home: Home) -> None:
    """tool_search's rule and its description both ask about every deferred tool: once per
    pass. The next pass asks again, so a tool turned off between rounds is gone from both."""
    registry = ToolRegistry([*TOOL_SEARCH_TOOLS, radio])
    run = run_context(home, services=services_over(home, registry))
    SWITCH["radio"] = True
    ASKED.clear()
    names = [s.name for s in registry.specs_for_run(run)]
    assert names == ["tool_search"] and ASKED == ["radio"]
    assert "radio" in registry.specs_for_run(run)[0].description and len(ASKED) == 2
    run.state.loaded_tools.append("radio")
    assert [s.name for s in registry.specs_for_run(run)] == ["tool_search", "radio"]
    assert len(ASKED) == 3
    SWITCH["radio"] = False
    try:
        assert registry.specs_for_run(run) == []  # radio off, so nothing left to search for
        assert deferred_tools(run, registry) == []
        assert "radio is off" in (radio.unavailable_reason(run) or "")  # outside a pass
    finally:
        SWITCH["radio"] = True
    assert [s.name for s in registry.specs_for_run(run)] == ["tool_search", "radio"]


def _touch_later(folder: Path) -> None:
    """A folder's time moves on by a second: a file system's clock ticks coarsely, and two
    changes within one tick would leave it the same."""
    stat = folder.stat()
    os.utime(folder, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_use_skill_follows_skills_added_and_removed_while_running(home: Home) -> None:
    run = run_context(home)
    registry = registry_for(run)
    assert "use_skill" not in [s.name for s in registry.specs_for_run(run)]
    folder = run.home.skills_dir / "greet"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: greet\ndescription: Greets.\n---\nSay hi.\n")
    _touch_later(run.home.skills_dir)
    assert use_skill.unavailable_reason(run) is None
    assert "use_skill" in [s.name for s in registry.specs_for_run(run)]
    (folder / "SKILL.md").unlink()
    folder.rmdir()
    _touch_later(run.home.skills_dir)
    assert "no skills" in (use_skill.unavailable_reason(run) or "")


def test_use_skill_asks_again_for_a_replaced_bot(home: Home) -> None:
    """Another bot sees only the library skills its bot.toml lists; its settings changed
    (a new Bot) are seen at once."""
    from atlas.newbot import create_bot

    create_bot(home, "helper", title="Helper", description="Helps.")
    folder = home.skills_dir / "greet"
    folder.mkdir(exist_ok=True)
    (folder / "SKILL.md").write_text("---\nname: greet\ndescription: Greets.\n---\nSay hi.\n")
    helper = home.bot("helper")
    home.replace_bot_settings("helper", helper.settings.model_copy(update={"skills": []}))
    assert "no skills" in (use_skill.unavailable_reason(run_context(home, bot="helper")) or "")
    home.replace_bot_settings("helper", helper.settings.model_copy(update={"skills": ["greet"]}))
    assert use_skill.unavailable_reason(run_context(home, bot="helper")) is None


def test_the_skills_folders_are_looked_at_once_a_second(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stat per folder per model round was ~1.5 % of a turn: a skill added shows within a
    second, not in the very next round."""
    monkeypatch.setattr(skills_module, "SKILLS_RECHECK_SECONDS", 1.0)
    now = [5000.0]
    monkeypatch.setattr(skills_module.time, "monotonic", lambda: now[0])
    run = run_context(home)
    assert "no skills" in (use_skill.unavailable_reason(run) or "")
    folder = run.home.skills_dir / "greet"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: greet\ndescription: Say hi.\n---\nHi.\n")
    _touch_later(run.home.skills_dir)
    now[0] += 0.5
    assert "no skills" in (use_skill.unavailable_reason(run) or ""), "not looked at yet"
    now[0] += 0.5
    assert use_skill.unavailable_reason(run) is None, "seen once the second is over"
