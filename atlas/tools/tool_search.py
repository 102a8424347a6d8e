"""tool_search: find deferred tools by keywords or name and load them into the conversation.

Deferred tools cost nothing until loaded. A search ranks them with BM25 over name, source,
description and parameter names (exact names first) and loads what it finds: the registry
lists loaded tools after the always-on ones, from the next round on. A tool stays loaded for
as long as the search result that loaded it (or a call of it) stays in the history:
`prune_loaded_tools` drops the others after a compaction.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from atlas.agent.tokens import count_tokens, tokens_at_most
from atlas.errors import ToolError
from atlas.providers.base import Message
from atlas.tools.registry import RunContext, Tool, ToolRegistry, tool

MAX_DESCRIPTION_TOKENS = 4_000
WINDOW_SHARE = 0.05
LOADED_PREFIX = "Loaded tools: "
LOADED_LINE = re.compile(rf"^{LOADED_PREFIX}(.+?) —", re.MULTILINE)
# How much each field counts: a word in the name says more than one in the description.
FIELD_WEIGHTS = {"name": 3, "source": 2, "parameters": 2, "description": 1}

_default_registry: ToolRegistry | None = None


def registry_for(run: RunContext) -> ToolRegistry:
    """The registry the run's loop uses (its services say), else the built-in one."""
    if run.services is not None:
        return run.services.registry(run.bot)
    global _default_registry
    if _default_registry is None:
        from atlas.tools.builtin import builtin_tools

        _default_registry = ToolRegistry(builtin_tools(TOOL_SEARCH_TOOLS))
    return _default_registry


def tool_source(t: Tool) -> str:
    """Where a tool comes from: its MCP server (`mcp__<server>__<tool>`), else its module."""
    if t.name.startswith("mcp__"):
        return "mcp:" + t.name.split("__")[1]
    return t.fn.__module__.rsplit(".", 1)[-1]


def deferred_tools(run: RunContext, registry: ToolRegistry | None = None) -> list[Tool]:
    """The deferred tools this run could load, in registry order."""
    registry = registry or registry_for(run)
    return [t for t in registry if t.deferred and t.unavailable_reason(run) is None]


# ---- BM25 -------------------------------------------------------------------------------------


STOP_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "how", "i", "in", "is",
        "it", "me", "my", "of", "on", "or", "the", "this", "to", "use", "what", "when", "with",
        "you", "your",
    }
)  # fmt: skip
# A match scoring under this share of the best one is noise: loading it would cost tokens.
MIN_SHARE_OF_BEST = 0.25


def words(text: str) -> list[str]:
    """Lowercase word stems: `browser_exec` → browser, exec; a plural `s` is dropped."""
    out = []
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word not in STOP_WORDS:
            out.append(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return out


def tool_words(t: Tool) -> list[str]:
    fields = {
        "name": t.name,
        "source": tool_source(t),
        "parameters": " ".join(t.spec().parameters.get("properties", {})),
        "description": t.description,
    }
    out: list[str] = []
    for field, text in fields.items():
        out.extend(words(text) * FIELD_WEIGHTS[field])
    return out


@dataclass
class BM25:
    """Okapi BM25 over small documents (k1 1.2, b 0.75)."""

    documents: list[list[str]]
    k1: float = 1.2
    b: float = 0.75

    def scores(self, query: Iterable[str]) -> list[float]:
        n = len(self.documents)
        if n == 0:
            return []
        average = sum(len(d) for d in self.documents) / n or 1.0
        counts = [Counter(d) for d in self.documents]
        result = [0.0] * n
        for term in set(query):
            df = sum(1 for c in counts if term in c)
            if df == 0:
                continue
            idf = math.log((n - df + 0.5) / (df + 0.5) + 1)
            for i, c in enumerate(counts):
                tf = c.get(term, 0)
                if tf:
                    norm = 1 - self.b + self.b * len(self.documents[i]) / average
                    result[i] += idf * tf * (self.k1 + 1) / (tf + self.k1 * norm)
        return result


def search(run: RunContext, registry: ToolRegistry, query: str, limit: int) -> list[Tool]:
    """Exact names first, then the best BM25 matches among the run's deferred tools."""
    candidates = deferred_tools(run, registry)
    by_name = {t.name: t for t in candidates}
    exact = [by_name[w] for w in re.split(r"[\s,]+", query.strip()) if w in by_name]
    scores = BM25([tool_words(t) for t in candidates]).scores(words(query))
    floor = max(scores, default=0.0) * MIN_SHARE_OF_BEST
    pairs = sorted(zip(scores, candidates, strict=True), key=lambda p: -p[0])
    ranked = [t for score, t in pairs if score > 0 and score >= floor]
    found: list[Tool] = []
    for t in exact + ranked:
        if t not in found:
            found.append(t)
    return found[:limit]


# ---- loading and unloading --------------------------------------------------------------------


def load(run: RunContext, tools: list[Tool]) -> None:
    for t in tools:
        if t.name not in run.state.loaded_tools:
            run.state.loaded_tools.append(t.name)


def prune_loaded_tools(run: RunContext, history: list[Message]) -> list[str]:
    """Unload the tools whose loading no longer shows in `history` (after a compaction): kept
    are those named by a tool_search result or called in it. Returns the names unloaded."""
    kept: set[str] = set()
    for message in history:
        if message.role == "tool" and message.name == "tool_search":
            for match in LOADED_LINE.finditer(message.content):
                kept.update(name.strip() for name in match.group(1).split(","))
        elif message.role == "assistant":
            kept.update(call.name for call in message.tool_calls)
    dropped = [name for name in run.state.loaded_tools if name not in kept]
    run.state.loaded_tools[:] = [name for name in run.state.loaded_tools if name in kept]
    return dropped


def _first_line(text: str) -> str:
    return text.strip().split("\n\n")[0].replace("\n", " ")[:200]


def _answer(found: list[Tool], missing: list[str]) -> str:
    lines = []
    if found:
        names = ", ".join(t.name for t in found)
        lines.append(f"{LOADED_PREFIX}{names} — call them directly from now on.")
        lines.extend(f"- {t.name} ({tool_source(t)}): {_first_line(t.description)}" for t in found)
    if missing:
        lines.append(f"Not found: {', '.join(missing)}.")
    return "\n".join(lines)


# ---- the tool ---------------------------------------------------------------------------------


def _when_something_is_deferred(run: RunContext) -> str | None:
    if deferred_tools(run):
        return None
    return "not available: no tool is deferred for this run"


BASE_DESCRIPTION = """Find tools that are not loaded yet and load them. query: keywords, an \
exact tool name, or "select:A,B" to load those tools by name. A tool found is loaded: call it \
directly from then on. Deferred tools by source:"""


def describe_tool_search(run: RunContext) -> str:
    """The description with the deferred tools by source, within its token budget."""
    budget = min(MAX_DESCRIPTION_TOKENS, int(run.settings.limits.context_window * WINDOW_SHARE))
    groups: dict[str, list[str]] = {}
    for t in deferred_tools(run):
        groups.setdefault(tool_source(t), []).append(t.name)
    return _description(budget, tuple((source, tuple(names)) for source, names in groups.items()))


# Asked for in every model round; the answer changes only when the deferred tools do, and
# counting every name's tokens each time cost ~10 % of a turn's CPU (docs/benchmarks.md).
@functools.lru_cache(maxsize=64)
def _description(budget: int, groups: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    whole = BASE_DESCRIPTION + "".join(
        f"\n{source}: " + ", ".join(names) for source, names in groups
    )
    if tokens_at_most(whole) <= budget:
        return whole  # every name fits even at a token per byte: nothing to count
    limit = budget - 25  # room for the closing note
    lines = [BASE_DESCRIPTION]
    used = count_tokens(BASE_DESCRIPTION)
    left_out = 0
    for source, names in groups:
        head = f"\n{source}: "
        cost = count_tokens(head)
        shown: list[str] = []
        for name in names:
            more = count_tokens(f"{name}, ")
            if used + cost + more > limit:
                break
            shown.append(name)
            cost += more
        left_out += len(names) - len(shown)
        if shown:
            lines.append(head + ", ".join(shown))
            used += cost
    if left_out:
        lines.append(f"\n… and {left_out} more; search by keyword to find them.")
    text = "".join(lines)
    while count_tokens(text) > budget and len(lines) > 2:  # token counts are not quite additive
        lines.pop(-2)
        text = "".join(lines)
    return text


@tool(
    read_only=True,
    available=_when_something_is_deferred,
    describe=describe_tool_search,
    aliases={"max_results": "limit"},  # Claude Code's name
)
async def tool_search(
    run: RunContext,
    query: Annotated[str, Field(min_length=1, max_length=500)],
    limit: Annotated[int, Field(ge=1, le=10)] = 5,
) -> str:
    """Find tools that are not loaded yet and load them."""
    registry = registry_for(run)
    query = query.strip()
    if query.lower().startswith("select:"):
        wanted = [n.strip() for n in query[len("select:") :].split(",") if n.strip()]
        if not wanted:
            raise ToolError('select: needs tool names, e.g. "select:plan,browser_exec"')
        deferred = {t.name: t for t in deferred_tools(run, registry)}
        found = [deferred[n] for n in wanted if n in deferred]
        missing, always_on = [], []
        for name in wanted:
            other = registry.get(name)
            if name in deferred:
                continue
            if other is not None and not other.deferred and other.unavailable_reason(run) is None:
                always_on.append(name)  # nothing to load
            else:
                missing.append(name)
    else:
        found, missing, always_on = search(run, registry, query, limit), [], []
    load(run, found)
    if not found and not missing and not always_on:
        names = ", ".join(t.name for t in deferred_tools(run, registry))
        return f"No deferred tool matches {query!r}. Deferred tools: {names or 'none'}."
    answer = _answer(found, missing)
    if always_on:
        answer += f"\nAlready available (always loaded): {', '.join(always_on)}."
    return answer.strip()


TOOL_SEARCH_TOOLS: list[Tool] = [tool_search]
