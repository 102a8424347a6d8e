"""docs/tools.md's run-kind table says who has which tool: the code must agree with it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from atlas.home import Home
from atlas.newbot import create_bot
from atlas.tools.catalog import default_registry
from atlas.tools.registry import ToolRegistry
from tests.helpers import BASE_CONFIG, make_home, run_context

DOC = Path(__file__).resolve().parents[2] / "docs" / "tools.md"
HEADING = "## Who has which tool"
RUN_KINDS = ("conversation", "bot", "routine", "subagent")
# Tool lists written but perhaps not yet in atlas/tools/catalog.py: added here until they are.
LISTS: list[tuple[str, str]] = []  # every tool list is in the catalog now


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """The table under HEADING: tool name → column → cell (backticks kept out)."""
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[2:]:  # after the header and the |---| line
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(header), f"docs/tools.md: row with the wrong cell count: {line}"
        row = dict(zip(header, cells, strict=True))
        rows[row["tool"].strip("`")] = row
    return rows


def full_registry() -> ToolRegistry:
    registry = default_registry()
    for module, name in LISTS:
        for tool in getattr(importlib.import_module(module), name):
            if registry.get(tool.name) is None:
                registry.add(tool)
    return registry


@pytest.fixture
def everything_home(tmp_path: Path) -> Home:
    """A home where every condition holds: two bots, a skill, a browser, something deferred,
    an executor."""
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    extra = '\n[browser]\nchrome = "/bin/sh"\n\n[executors.codex]\nenabled = true\n'
    home = make_home(tmp_path / "home", config=config + extra)
    create_bot(home, "scout", "Scout", "A second bot.")
    skill = home.skills_dir / "demo"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: demo\ndescription: A demo.\n---\nDo it.\n")
    return home


def test_the_table_parser_reads_cells() -> None:
    text = f"{HEADING}\n\n| tool | loaded |\n|---|---|\n| `a_tool` | always |\n\n## Next\n| x |"
    assert table_rows(text) == {"a_tool": {"tool": "`a_tool`", "loaded": "always"}}


def test_every_tool_is_in_the_table_as_the_code_has_it(everything_home: Home) -> None:
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    registry = full_registry()
    code_names = {t.name for t in registry}
    documented = {name for name in rows if "<" not in name}  # patterns like mcp__<server>__<tool>
    assert code_names - documented == set(), "tools missing from the table in docs/tools.md"
    assert documented - code_names == set(), "the table names tools the code does not have"
    runs = {kind: run_context(everything_home, kind=kind) for kind in RUN_KINDS}
    wrong = []
    for tool in registry:
        row = rows[tool.name]
        loaded = "deferred" if tool.deferred else "always"
        if row["loaded"] != loaded:
            wrong.append(f"{tool.name}: loaded is {loaded}, the table says {row['loaded']}")
        for kind, run in runs.items():
            reason = tool.unavailable_reason(run)
            has = "yes" if reason is None else "no"
            if row[kind] != has:
                wrong.append(f"{tool.name} in a {kind} run: {has} ({reason}), table: {row[kind]}")
    assert not wrong, "docs/tools.md disagrees with the code:\n" + "\n".join(wrong)


def test_conditions_in_the_table_are_real_conditions(tmp_path: Path) -> None:
    """A tool with an 'also needs' condition is unavailable in a home that lacks it."""
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    bare = make_home(tmp_path / "bare", config=config + '\n[browser]\nchrome = "/nowhere"\n')
    run = run_context(bare)
    registry = full_registry()
    for name in (
        "use_skill",
        "browser_exec",
        "message_agent",
        "executor_accounts",
    ):
        assert rows[name]["also needs"], f"{name}: its condition is not in the table"
        assert registry.get(name).unavailable_reason(run), f"{name} available without its need"
    create_bot(bare, "scout", "Scout", "A second bot.")
    assert registry.get("bot_create").unavailable_reason(run_context(bare, bot="scout"))
    assert re.search(r"main agent", rows["bot_create"]["also needs"])


async def test_the_rules_issue_21_added_are_in_the_table_and_the_code(
    everything_home: Home,
) -> None:
    """message_agent is not offered in routine runs (nor callable there); a bot sees the library
    skills its `skills` lists (so with `skills = []` and none of its own it has no use_skill)."""
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    registry = full_registry()
    assert rows["message_agent"]["routine"] == "no"
    routine = run_context(everything_home, kind="routine")
    assert "message_agent" not in {t.name for t in registry.for_run(routine)}
    called = await registry.call(routine, "message_agent", '{"target": "scout", "message": "hi"}')
    assert called.is_error and "not available in a routine run" in called.text
    assert "lists" in rows["use_skill"]["also needs"]
    bot_toml = everything_home.bots_dir / "scout" / "bot.toml"
    bot_toml.write_text(bot_toml.read_text() + "skills = []\n")
    home = Home(everything_home.root)
    use_skill = registry.get("use_skill")
    assert use_skill.unavailable_reason(run_context(home, bot="scout"))
    assert use_skill.unavailable_reason(run_context(home)) is None  # the main bot owns the library


def test_browser_exec_needs_a_browser_found_or_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """browser_exec's condition (issue 21 item 7): with no [browser] chrome, a browser found on
    PATH is enough, in each run kind the table gives it; a [browser] chrome that names nothing
    makes it unavailable, the reason naming the key."""
    row = table_rows(DOC.read_text(encoding="utf-8"))["browser_exec"]
    assert "PATH" in row["also needs"] and "[browser] chrome" in row["also needs"]
    edge = tmp_path / "bin" / "msedge"
    edge.parent.mkdir()
    edge.write_text("#!/bin/sh\n")
    edge.chmod(0o755)
    monkeypatch.setenv("PATH", str(edge.parent))
    tool = full_registry().get("browser_exec")
    home = make_home(tmp_path / "home")
    for kind in RUN_KINDS:
        offered = tool.unavailable_reason(run_context(home, kind=kind)) is None
        assert offered == (row[kind] == "yes"), kind
    config = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1")
    named = make_home(tmp_path / "named", config=config + '\n[browser]\nchrome = "/no/such"\n')
    reason = tool.unavailable_reason(run_context(named))
    assert reason and '[browser] chrome = "/no/such"' in reason


def test_ask_parent_is_for_subagents_only_in_the_table_and_the_code(everything_home: Home) -> None:
    """Issue 21 item 11: ask_parent is given to subagents only, and says why to the others."""
    row = table_rows(DOC.read_text(encoding="utf-8"))["ask_parent"]
    assert [row[kind] for kind in RUN_KINDS] == ["no", "no", "no", "yes"]
    ask_parent = full_registry().get("ask_parent")
    assert ask_parent.unavailable_reason(run_context(everything_home, kind="subagent")) is None
    for kind in RUN_KINDS[:3]:
        reason = ask_parent.unavailable_reason(run_context(everything_home, kind=kind))
        assert reason and "only for subagents" in reason, kind
