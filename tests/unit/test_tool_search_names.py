"""tool_search takes Claude Code's `max_results` for `limit`, as a model sends it (raw JSON)."""

from __future__ import annotations

from atlas.home import Home
from atlas.tools.catalog import default_registry
from tests.helpers import run_context

QUERY = "plan steps conversations search routines schedule"


async def test_max_results_is_limit(home: Home) -> None:
    registry = default_registry()  # no dispatcher runs: the built-in registry is searched
    wide = run_context(home)
    result = await registry.call(wide, "tool_search", f'{{"query": "{QUERY}"}}')
    assert not result.is_error, result.text
    assert len(wide.state.loaded_tools) >= 2
    narrow = run_context(home)
    result = await registry.call(narrow, "tool_search", f'{{"query": "{QUERY}", "max_results": 1}}')
    assert not result.is_error, result.text
    assert len(narrow.state.loaded_tools) == 1
    too_many = await registry.call(
        run_context(home), "tool_search", '{"query": "x", "max_results": 11}'
    )
    assert too_many.is_error and "limit" in too_many.text
    both = await registry.call(
        run_context(home), "tool_search", '{"query": "x", "max_results": 2, "limit": 3}'
    )
    assert both.is_error and "'max_results' and 'limit' mean the same" in both.text
