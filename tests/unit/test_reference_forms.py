"""The tool reference's shapes and Claude Code's habits, accepted as sent (issue 37): what a model
trained on Claude Code's tools sends works, without being advertised (the prefix stays small)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from atlas.channels.base import Answer, Question, QuestionOutcome
from atlas.home import Home
from atlas.tools.ask import ask_user
from atlas.tools.catalog import default_registry
from atlas.tools.files import edit_file, read_file, write_file
from atlas.tools.plan import plan
from atlas.tools.registry import RunContext
from atlas.tools.search_files import find_files
from atlas.tools.skills import use_skill
from tests.helpers import close_test_stores, open_store_for_tests, run_context


@pytest.fixture
async def run(home: Home) -> AsyncIterator[RunContext]:
    ctx = run_context(home)
    ctx.open_store = open_store_for_tests
    (home.main_bot.workspace / "src").mkdir(parents=True, exist_ok=True)
    (home.main_bot.workspace / "src" / "app.py").write_text("import os\nprint('hello')\n")
    (home.main_bot.workspace / "notes.md").write_text("hello again\n")
    yield ctx
    await close_test_stores()


def test_the_references_required_parameters_are_marked_and_batches_not_advertised() -> None:
    expected = [
        (read_file, ["path"], "reads"),
        (write_file, ["path", "content"], "files"),
        (edit_file, ["path", "old_string", "new_string"], "edits"),
    ]
    for tool, required, batch in expected:
        schema = tool.spec().parameters
        assert schema["required"] == required, tool.name
        assert batch not in schema["properties"], tool.name
        for name in required:
            assert "default" not in schema["properties"][name], (tool.name, name)


def _noise(node: object, where: str) -> list[str]:
    """Keys of a schema that tell the model nothing (a property may be named `title`)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$defs", "$ref", "additionalProperties") or (
                key == "title" and isinstance(value, str)
            ):
                found.append(f"{where}.{key}")
            empty = isinstance(value, str | list | dict) and not value
            if key == "default" and (value is None or value is False or empty):
                found.append(f"{where}.default={value!r}")
            if key == "anyOf" and {"type": "null"} in value:
                found.append(f"{where}.anyOf null")
            if key == "properties":
                for name, sub in value.items():
                    found += _noise(sub, f"{where}.{name}")
            else:
                found += _noise(value, f"{where}.{key}")
    elif isinstance(node, list):
        for item in node:
            found += _noise(item, where)
    return found


def test_no_advertised_schema_carries_what_says_nothing() -> None:
    for tool in default_registry():
        assert _noise(tool.spec().parameters, tool.name) == []


async def test_a_batch_form_is_still_accepted(run: RunContext) -> None:
    both = await read_file.invoke(run, {"reads": [{"path": "notes.md"}, {"path": "src/app.py"}]})
    assert not both.is_error and "hello again" in both.text and "print('hello')" in both.text


async def test_find_files_takes_claude_codes_grep_forms(run: RunContext) -> None:
    files = await find_files.invoke(run, {"pattern": "hello", "output_mode": "files_with_matches"})
    assert not files.is_error, files.text
    listed = files.text.splitlines()
    assert "notes.md" in listed and "src/app.py" in listed
    numbered = await find_files.invoke(run, {"pattern": "import", "-n": True, "-i": True})
    assert not numbered.is_error and "src/app.py:1:import os" in numbered.text


async def test_a_glob_given_as_a_content_pattern_says_how_to_find_names(run: RunContext) -> None:
    refused = await find_files.invoke(run, {"pattern": "**/*.py"})
    assert refused.is_error and "regex parse error" in refused.text
    assert 'target="files"' in refused.text and "'**/*.py'" in refused.text
    # A glob that is also a valid regex finds nothing in contents: the same hint, not an error.
    quiet = await find_files.invoke(run, {"pattern": "src/*.py"})
    assert not quiet.is_error and 'target="files"' in quiet.text
    # The hint is for globs only: an ordinary regex with no match says nothing of it.
    plain = await find_files.invoke(run, {"pattern": "nowhere.*to be found"})
    assert 'target="files"' not in plain.text
    named = await find_files.invoke(run, {"pattern": "**/*.py", "target": "files"})
    assert "src/app.py" in named.text


async def test_ask_user_takes_header_and_multi_select(run: RunContext) -> None:
    asked: list[list[Question]] = []

    async def person(questions: list[Question]) -> QuestionOutcome:
        asked.append(questions)
        return QuestionOutcome("submitted", [Answer(["a", "b"])])

    run.ask_questions = person
    question = {"question": "Which ones?", "header": "Scope", "choices": ["a", "b"]}
    result = await ask_user.invoke(run, {"questions": [{**question, "multiSelect": True}]})
    assert not result.is_error, result.text
    assert asked[0][0].text == "Scope: Which ones?" and asked[0][0].multi_select


async def test_use_skill_takes_skill_and_args(run: RunContext, home: Home) -> None:
    folder = home.skills_dir / "greet"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: greet\ndescription: Greets someone\n---\nGreet $ARGUMENTS warmly.\n"
    )
    loaded = await use_skill.invoke(run, {"skill": "greet", "args": "Ada"})
    assert not loaded.is_error and "Greet Ada warmly." in loaded.text


async def test_plan_takes_claude_codes_todo_list(run: RunContext) -> None:
    todos = [
        {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
        {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
    ]
    result = await plan.invoke(run, {"todos": todos})
    assert not result.is_error, result.text
    assert "1: Read the code" in result.text and "2: Fix the bug" in result.text
    merged = await plan.invoke(run, {"todos": [{"content": "x"}], "merge": True})
    assert merged.is_error and "item 1 has no id" in merged.text


def test_the_shipped_mcp_servers_line_uncommented_is_a_valid_bot(home: Home) -> None:
    """bots/atlas/bot.toml shows `# mcp_servers = ["github"]`: uncommented, the home loads."""
    from atlas.mcp.config import bot_may_use, bot_server_names

    bot_toml = home.main_bot.root / "bot.toml"
    shipped = bot_toml.read_text()
    assert '# mcp_servers = ["github"]' in shipped
    bot_toml.write_text(shipped.replace('# mcp_servers = ["github"]', 'mcp_servers = ["github"]'))
    bot = Home(home.root).main_bot
    assert bot_server_names(bot) == ["github"]
    assert bot_may_use(bot, "github") and not bot_may_use(bot, "slack")
    bot_toml.write_text(shipped + "\n[mcp_servers.github]\n")  # the table form, as before
    assert bot_server_names(Home(home.root).main_bot) == ["github"]
