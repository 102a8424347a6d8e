"""Skills as the reference has them (issue 21.2): the main bot's skills are the home's library,
another bot sees its own plus the library skills its bot.toml lists, and skill_manage takes
`operations` each naming its skill, with `file_content` for write_file (the older top-level
`name` and `content` still work). Every call goes through the registry with raw JSON."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from atlas.errors import ConfigError
from atlas.home import Home
from atlas.newbot import create_bot
from atlas.tools.catalog import default_registry
from atlas.tools.registry import RunContext
from tests.helpers import run_context

REGISTRY = default_registry()


def skill_md(name: str, body: str = "Step 1.") -> str:
    return f"---\nname: {name}\ndescription: Does {name}.\n---\n\n{body}\n"


def write_skill(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "SKILL.md").write_text(skill_md(name))


def set_listed(home: Home, bot: str, line: str) -> Home:
    """Give a bot's bot.toml a `skills` line and load the home again, as a restart would."""
    path = home.bots_dir / bot / "bot.toml"
    path.write_text(path.read_text() + line + "\n")
    return Home(home.root)


async def call(run: RunContext, name: str, arguments: dict | str):  # type: ignore[no-untyped-def]
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return await REGISTRY.call(run, name, raw)


@pytest.fixture
def two_bots(home: Home) -> Home:
    create_bot(home, "scout", "Scout", "A second bot.")
    for name in ("alpha", "beta"):
        write_skill(home.skills_dir, name)
    return home


async def test_the_main_bot_creates_in_the_library_another_bot_in_its_own_folder(
    two_bots: Home,
) -> None:
    home = two_bots
    new = {"operations": [{"name": "gamma", "action": "create", "content": skill_md("gamma")}]}
    made = await call(run_context(home), "skill_manage", new)
    assert not made.is_error, made.text
    assert (home.skills_dir / "gamma" / "SKILL.md").exists()
    assert not (home.main_bot.root / "skills").exists()
    new["operations"][0].update(name="delta", content=skill_md("delta"))
    mine = await call(run_context(home, bot="scout"), "skill_manage", new)
    assert not mine.is_error, mine.text
    assert (home.bots_dir / "scout" / "skills" / "delta" / "SKILL.md").exists()
    assert not (home.skills_dir / "delta").exists()
    # The main bot owns the library: it may delete a library skill; another bot may not.
    denied = await call(run_context(home, bot="scout"), "skill_manage", {
        "operations": [{"name": "alpha", "action": "delete"}]})  # fmt: skip
    assert denied.is_error and "home's library" in denied.text
    deleted = await call(run_context(home), "skill_manage", {
        "operations": [{"name": "alpha", "action": "delete"}]})  # fmt: skip
    assert not deleted.is_error and not (home.skills_dir / "alpha").exists()


async def test_a_bot_sees_its_own_skills_and_the_library_skills_it_lists(two_bots: Home) -> None:
    write_skill(two_bots.bots_dir / "scout" / "skills", "own")
    home = set_listed(two_bots, "scout", 'skills = ["alpha"]')
    scout = run_context(home, bot="scout")
    description = REGISTRY.get("use_skill").spec(scout).description
    assert "- alpha:" in description and "- own:" in description and "beta" not in description
    loaded = await call(scout, "use_skill", {"name": "alpha"})
    assert not loaded.is_error, loaded.text
    refused = await call(scout, "use_skill", {"name": "beta"})
    assert refused.is_error and "no skill named 'beta'" in refused.text
    # The main bot sees the whole library: it is its own.
    main = REGISTRY.get("use_skill").spec(run_context(home)).description
    assert "- alpha:" in main and "- beta:" in main and "own" not in main


async def test_an_empty_list_means_no_library_skill_and_absent_means_all(two_bots: Home) -> None:
    everything = REGISTRY.get("use_skill").spec(run_context(two_bots, bot="scout")).description
    assert "- alpha:" in everything and "- beta:" in everything
    home = set_listed(two_bots, "scout", "skills = []")
    scout = run_context(home, bot="scout")
    assert "no skills" in (REGISTRY.get("use_skill").unavailable_reason(scout) or "")
    result = await call(scout, "use_skill", {"name": "alpha"})
    assert result.is_error and "no skills" in result.text


def test_a_badly_spelt_listed_skill_fails_at_load_naming_file_and_key(two_bots: Home) -> None:
    with pytest.raises(ConfigError) as caught:
        set_listed(two_bots, "scout", 'skills = ["Not A Name"]')
    message = str(caught.value)
    assert "bots/scout/bot.toml" in message and "skills" in message


def test_a_listed_skill_the_library_lacks_is_a_warning(
    two_bots: Home, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="atlas.home"):
        set_listed(two_bots, "scout", 'skills = ["alpha", "later"]')
    assert "bot.toml" in caplog.text and "later" in caplog.text and "alpha" not in caplog.text


# ---- skill_manage's two shapes ------------------------------------------------------------------


async def test_the_references_shape_and_the_older_one_make_the_same_skill(home: Home) -> None:
    run = run_context(home)
    reference = {
        "operations": [
            {"name": "one", "action": "create", "content": skill_md("one")},
            {"name": "one", "action": "write_file", "file_path": "references/a.md",
             "file_content": "Notes.\n"},
        ]
    }  # fmt: skip
    older = {
        "name": "two",
        "operations": [
            {"action": "create", "content": skill_md("two")},
            {"action": "write_file", "file_path": "references/a.md", "content": "Notes.\n"},
        ],
    }
    for arguments in (reference, older):
        result = await call(run, "skill_manage", json.dumps(arguments))
        assert not result.is_error, result.text
    for name in ("one", "two"):
        assert (home.skills_dir / name / "references" / "a.md").read_text() == "Notes.\n"


async def test_one_call_changes_several_skills_all_or_none(home: Home) -> None:
    run = run_context(home)
    both = {
        "operations": [
            {"name": "first", "action": "create", "content": skill_md("first")},
            {"name": "second", "action": "create", "content": skill_md("second")},
        ]
    }
    made = await call(run, "skill_manage", both)
    assert not made.is_error and "'first' created" in made.text and "'second'" in made.text
    failing = {
        "operations": [
            {"name": "first", "action": "patch", "old_string": "Step 1.", "new_string": "Go."},
            {"name": "second", "action": "patch", "old_string": "absent", "new_string": "x"},
        ]
    }
    refused = await call(run, "skill_manage", failing)
    assert refused.is_error and "operation 2 (patch)" in refused.text
    assert "Step 1." in (home.skills_dir / "first" / "SKILL.md").read_text()  # untouched
    assert not [p for p in home.skills_dir.iterdir() if p.name.startswith(".staging-")]


async def test_shape_faults_are_named(home: Home) -> None:
    run = run_context(home)
    nameless = await call(run, "skill_manage", {"operations": [{"action": "create"}]})
    assert nameless.is_error and "operation 1 (create): give `name`" in nameless.text
    await call(run, "skill_manage", {"name": "one", "operations": [
        {"action": "create", "content": skill_md("one")}]})  # fmt: skip
    disagree = {"operations": [{"name": "one", "action": "write_file", "file_path": "assets/x",
                                "content": "a", "file_content": "b"}]}  # fmt: skip
    result = await call(run, "skill_manage", disagree)
    assert result.is_error and "content and file_content disagree" in result.text
    bad = await call(run, "skill_manage", {"operations": [{"name": "Bad!", "action": "delete"}]})
    assert bad.is_error and "operation 1 (delete)" in bad.text and "not allowed" in bad.text


def test_the_schema_is_the_references() -> None:
    schema = REGISTRY.get("skill_manage").spec().parameters
    assert schema["required"] == ["operations"] and "name" not in schema["properties"]
    operation = schema["properties"]["operations"]["items"]  # inlined: no $defs indirection
    assert operation["required"][0] == "name" and "action" in operation["required"]
    assert "file_content" in operation["properties"]
