"""Tools from typed functions: schema, description, aliases, availability, fixed order."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from atlas.home import Bot
from atlas.tools.registry import RunContext, ToolRegistry, only_for, tool
from tests.helpers import run_context


@tool(read_only=True, aliases={"file_path": "path"})
async def peek(
    run: RunContext,
    path: str,
    lines: Annotated[int, Field(ge=1, le=50, description="How many lines")] = 5,
) -> str:
    """Show the start of a file."""
    return f"{path}:{lines}"


@tool(deferred=True)
async def rare(run: RunContext) -> str:
    """Rarely needed."""
    return "rare ran"


@tool(available=only_for("conversation", "bot"))
async def chatty(run: RunContext) -> str:
    """Only where a person is present."""
    return "hi"


REGISTRY = ToolRegistry([peek, rare, chatty])


def test_schema_and_description_come_from_the_function() -> None:
    spec = peek.spec()
    assert spec.name == "peek" and spec.description == "Show the start of a file."
    props = spec.parameters["properties"]
    assert props["path"] == {"type": "string"}
    assert props["lines"]["description"] == "How many lines" and props["lines"]["maximum"] == 50
    assert spec.parameters["required"] == ["path"]
    assert "title" not in str(spec.parameters)  # titles cost tokens and say nothing
    assert "run" not in props  # the injected context is invisible to the model


async def test_arguments_are_validated_with_clear_errors(home) -> None:
    run = run_context(home)
    assert (await peek.invoke(run, {"path": "a", "lines": 3})).text == "a:3"
    bad = await peek.invoke(run, {"path": "a", "lines": 99})
    assert bad.is_error and "lines" in bad.text and "50" in bad.text
    extra = await peek.invoke(run, {"path": "a", "colour": "red"})
    assert extra.is_error and "colour" in extra.text
    missing = await peek.invoke(run, "{}")
    assert missing.is_error and "path" in missing.text and "required" in missing.text.lower()
    not_object = await peek.invoke(run, "[1, 2]")
    assert not_object.is_error and "JSON object" in not_object.text


async def test_aliases_accepted_and_disagreement_refused(home) -> None:
    run = run_context(home)
    assert (await peek.invoke(run, {"file_path": "x"})).text == "x:5"
    assert (await peek.invoke(run, {"file_path": "x", "path": "x"})).text == "x:5"
    clash = await peek.invoke(run, {"file_path": "x", "path": "y"})
    assert clash.is_error and "disagree" in clash.text


async def test_availability_by_run_kind_and_bot_tools_list(home) -> None:
    run = run_context(home)
    assert [t.name for t in REGISTRY.for_run(run)] == ["peek", "chatty"]  # rare is deferred
    routine = run_context(home, kind="routine")
    result = await REGISTRY.call(routine, "chatty", "{}")
    assert result.is_error and "not available in a routine run" in result.text

    bot = home.bot(None)
    narrowed = Bot(bot.name, bot.root, bot.settings.model_copy(update={"tools": ["peek"]}), home)
    limited = RunContext(home=home, bot=narrowed, conversation_id=1)
    assert [t.name for t in REGISTRY.for_run(limited)] == ["peek"]
    refused = await REGISTRY.call(limited, "chatty", "{}")
    assert refused.is_error and "tools list" in refused.text and "bot.toml" in refused.text


async def test_deferred_tool_joins_after_its_first_call_and_order_is_fixed(home) -> None:
    run = run_context(home)
    assert (await REGISTRY.call(run, "rare", "{}")).text == "rare ran"
    assert [t.name for t in REGISTRY.for_run(run)] == ["peek", "chatty", "rare"]  # joins at the end
    again = [t.spec() for t in REGISTRY.for_run(run)]
    assert again == [t.spec() for t in REGISTRY.for_run(run)]


def test_a_tool_needs_a_docstring() -> None:
    import pytest

    async def undocumented(run: RunContext) -> str:
        return ""

    with pytest.raises(TypeError, match="docstring"):
        tool()(undocumented)


def test_outside_tools_are_marked_untrusted_and_own_tools_are_not() -> None:
    from atlas.tools.catalog import default_registry

    registry = default_registry()
    for name in ("web_search", "web_fetch", "browser_exec"):
        assert registry.get(name).untrusted, name
    for name in ("run_command", "write_file", "memory"):
        assert not registry.get(name).untrusted, name
