"""tool_search: BM25 by keywords, exact names first, select:, loading into the conversation,
the description's budget, and unloading once a compaction dropped the result."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from atlas.agent.compaction import truncate_old_tool_outputs
from atlas.agent.tokens import count_tokens
from atlas.agents.services import HomeServices, provide_services
from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.home import Home
from atlas.providers.base import Message, ToolCall
from atlas.providers.scripted import Reply, ScriptedModel
from atlas.runtime import Runtime
from atlas.tools.conversations import CONVERSATION_TOOLS
from atlas.tools.files import FILE_TOOLS
from atlas.tools.plan import PLAN_TOOLS
from atlas.tools.registry import RunContext, Tool, ToolRegistry, tool
from atlas.tools.tool_search import (
    TOOL_SEARCH_TOOLS,
    describe_tool_search,
    prune_loaded_tools,
    search,
    tool_search,
)
from atlas.trust.gate import OpenGate
from tests.fakes.recording_channel import RecordingChannel
from tests.helpers import BASE_CONFIG, make_home, run_context

ADDRESS = Address("atlas", "test", "chat-1", user="u1")
CONFIG = BASE_CONFIG.format(base_url="http://127.0.0.1:9/v1") + "\n[review]\nenabled = false\n"
ALWAYS_ON = ["read_file", "write_file", "edit_file", "find_files", "tool_search"]


@tool(deferred=True, read_only=True)
async def weather_lookup(run: RunContext, city: str) -> str:
    """Current weather and forecast for a city."""
    return f"{city}: rain"


@tool(deferred=True, read_only=True)
async def stock_quote(run: RunContext, ticker: str) -> str:
    """The latest price of a share on the stock market."""
    return f"{ticker}: 100"


FAKES = [weather_lookup, stock_quote]


def registry() -> ToolRegistry:
    return ToolRegistry([*FILE_TOOLS, *TOOL_SEARCH_TOOLS, *PLAN_TOOLS, *CONVERSATION_TOOLS, *FAKES])


def services_over(home: Home, tools: ToolRegistry) -> HomeServices:
    """The services of a dispatcher whose runtime has `tools`, as `atlas run` gives them."""
    return provide_services(Dispatcher(Runtime(home, model=ScriptedModel(), registry=tools), {}))


async def test_found_tools_load_after_the_always_on_ones(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", config=CONFIG)
    model = ScriptedModel(
        Reply(calls=[("tool_search", {"query": "weather forecast for a city"})]),
        Reply(calls=[("weather_lookup", {"city": "Oslo"})]),
        Reply(calls=[("tool_search", {"query": "select:plan, stock_quote,nope,read_file"})]),
        Reply("done"),
    )
    runtime = Runtime(home, model=model, registry=registry(), gate=OpenGate())
    dispatcher = Dispatcher(runtime, {"test": RecordingChannel()})
    services = provide_services(dispatcher)
    try:
        await dispatcher.submit(Inbound(ADDRESS, "what is the weather in Oslo?"))
        await dispatcher.wait_idle(ADDRESS)
        names = [[t.name for t in r.tools] for r in model.requests]
        assert names[0] == ALWAYS_ON
        assert names[1] == names[2] == [*ALWAYS_ON, "weather_lookup"]
        assert names[3] == [*ALWAYS_ON, "weather_lookup", "plan", "stock_quote"]
        # The always-on tools never change: the provider's cached prefix holds.
        assert all(r.tools[:5] == model.requests[0].tools[:5] for r in model.requests)
        found = model.requests[1].messages[-1].content
        assert found.startswith("Loaded tools: weather_lookup — call them directly")
        assert model.requests[2].messages[-1].content == "Oslo: rain"
        selected = model.requests[3].messages[-1].content
        assert selected.startswith("Loaded tools: plan, stock_quote —")
        assert "Not found: nope." in selected
        assert "Already available (always loaded): read_file." in selected
        description = model.requests[0].tools[4].description
        assert "\ntest_tool_search: weather_lookup, stock_quote" in description
        assert (
            "\nplan: plan" in description and "\nconversations: conversation_search" in description
        )
        model.assert_complete()
    finally:
        await services.close()
        await dispatcher.shutdown()
        await runtime.close()


def test_bm25_ranks_by_keywords_and_puts_exact_names_first(home: Home) -> None:
    run = run_context(home)
    reg = registry()
    assert [t.name for t in search(run, reg, "share price", 5)] == ["stock_quote"]
    assert search(run, reg, "todo list of steps", 5)[0].name == "plan"
    assert search(run, reg, "search old conversations", 5)[0].name == "conversation_search"
    # The exact name wins over better keyword matches for another tool.
    ranked = [t.name for t in search(run, reg, "stock market price weather_lookup", 5)]
    assert ranked[:2] == ["weather_lookup", "stock_quote"]
    assert len(search(run, reg, "city stock plan conversations", 2)) == 2
    assert search(run, reg, "xylophone", 5) == []
    # Parameter names count: `ticker` is only a parameter.
    assert [t.name for t in search(run, reg, "ticker", 5)] == ["stock_quote"]


async def test_nothing_found_lists_what_is_deferred(home: Home) -> None:
    run = run_context(home, services=services_over(home, registry()))
    result = await tool_search.invoke(run, {"query": "xylophone"})
    assert result.text.startswith("No deferred tool matches 'xylophone'. Deferred tools:")
    assert "weather_lookup" in result.text and run.state.loaded_tools == []
    empty = await tool_search.invoke(run, {"query": "select:"})
    assert empty.is_error
    too_many = await tool_search.invoke(run, {"query": "x", "limit": 11})
    assert too_many.is_error


async def test_unavailable_when_nothing_is_deferred(home: Home) -> None:
    only_always_on = ToolRegistry([*FILE_TOOLS, *TOOL_SEARCH_TOOLS])
    services = services_over(home, only_always_on)
    assert "no tool is deferred" in tool_search.unavailable_reason(
        run_context(home, services=services)
    )
    # Without a running dispatcher the built-in registry is searched (it defers `plan`).
    assert tool_search.unavailable_reason(run_context(home)) is None


def _many_mcp_tools(count: int) -> list[Tool]:
    return [
        dataclasses.replace(weather_lookup, name=f"mcp__server{i % 7}__operation_number_{i}")
        for i in range(count)
    ]


async def _description_tokens(tmp_path: Path, window: int, tools: int) -> tuple[int, str]:
    config = CONFIG.replace("[limits]\n", f"[limits]\ncontext_window = {window}\n")
    home = make_home(tmp_path / f"home{window}", config=config)
    reg = ToolRegistry([*FILE_TOOLS, *TOOL_SEARCH_TOOLS, *_many_mcp_tools(tools)])
    text = describe_tool_search(run_context(home, services=services_over(home, reg)))
    return count_tokens(text), text


async def test_the_description_stays_within_its_budget(tmp_path: Path) -> None:
    small, text = await _description_tokens(tmp_path, 8_000, 200)  # 5%: 400 tokens
    assert small <= 400 and "mcp:server0: mcp__server0__operation_number_0" in text
    assert "more; search by keyword" in text
    large, _ = await _description_tokens(tmp_path, 1_000_000, 3_000)  # capped at 4,000
    assert 3_000 < large <= 4_000
    whole, text = await _description_tokens(tmp_path, 128_000, 10)
    assert whole < 400 and "more; search" not in text and text.count("mcp__") == 10


def test_a_compaction_that_drops_the_result_unloads_the_tool(home: Home) -> None:
    run = run_context(home)
    run.state.loaded_tools[:] = ["plan", "weather_lookup", "stock_quote"]
    kept_result = Message(
        "tool",
        "Loaded tools: weather_lookup — call them directly from now on.\n" + "x" * 2_000,
        tool_call_id="c1",
        name="tool_search",
    )
    called = Message("assistant", "", tool_calls=[ToolCall("c2", "stock_quote", "{}")])
    history = [Message("user", "start"), Message("user", "[Summary …]"), kept_result, called]
    # Old tool outputs cut to save context keep the first line, so the tool stays loaded.
    history = truncate_old_tool_outputs(history, keep_last=0)
    assert prune_loaded_tools(run, history) == ["plan"]
    assert run.state.loaded_tools == ["weather_lookup", "stock_quote"]
