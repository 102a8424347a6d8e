"""The atlas import graph has no circle, and the tools do not reach the layers above them.

Imports under `if TYPE_CHECKING:` are left out (they never run); imports inside functions
count: a lazy import is still a dependency, only a hidden one. A tool that needs the
dispatcher's world gets it from `run.services` (atlas/tools/services.py) instead.
"""

from __future__ import annotations

import functools

import grimp
import pytest

# Circles still to break (issue 20), each exactly as it stands: a new circle, or one of these
# growing, fails; one that is gone must be struck off here so that it cannot come back.
# None is left: any circle fails.
KNOWN_CIRCLES: list[frozenset[str]] = []

# What the tools must not reach, even indirectly: the layers that run them.
ABOVE_THE_TOOLS = [
    "atlas.agent.loop",
    "atlas.agents",
    "atlas.chat",
    "atlas.cli",
    "atlas.channels.manager",
    "atlas.daemon",
    "atlas.dispatch",
    "atlas.recovery",
    "atlas.routines.runner",
    "atlas.routines.scheduler",
    "atlas.runtime",
    "atlas.services",
]
# What the dispatcher and the runtime must not reach: they are built before it, below it.
ABOVE_THE_DISPATCHER = ["atlas.agents", "atlas.chat", "atlas.cli", "atlas.daemon", "atlas.services"]


@functools.cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("atlas", exclude_type_checking_imports=True, cache_dir=None)


def circles(g: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected components with more than one module: m's is every module that
    m reaches and that reaches m."""
    found: set[frozenset[str]] = set()
    for module in g.modules:
        around = g.find_upstream_modules(module) & g.find_downstream_modules(module)
        if around:
            found.add(frozenset({module, *around}))
    return sorted(found, key=sorted)


def _hops(g: grimp.ImportGraph, chain: tuple[str, ...]) -> list[str]:
    lines = []
    for importer, imported in zip(chain, chain[1:], strict=False):
        details = g.get_import_details(importer=importer, imported=imported)
        where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
        lines.append(f"  {importer} -> {imported} ({where})")
    return lines


def describe(g: grimp.ImportGraph, circle: frozenset[str]) -> str:
    """The circle's modules and one loop through it, with the import lines that make it."""
    first, *rest = sorted(circle)
    other = next(m for m in rest if g.find_shortest_chain(importer=first, imported=m))
    there = g.find_shortest_chain(importer=first, imported=other) or ()
    back = g.find_shortest_chain(importer=other, imported=first) or ()
    return "\n".join(
        [f"{len(circle)} modules: {', '.join(sorted(circle))}", *_hops(g, there + back[1:])]
    )


def test_the_import_graph_has_no_new_circle() -> None:
    g = graph()
    new = [c for c in circles(g) if c not in KNOWN_CIRCLES]
    assert not new, "import circle(s):\n" + "\n\n".join(describe(g, c) for c in new)


def test_the_known_circles_are_still_there_as_they_were() -> None:
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in circles(graph())]
    assert not gone, f"no longer a circle, strike it off KNOWN_CIRCLES: {gone}"


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [("atlas.tools", ABOVE_THE_TOOLS), ("atlas.dispatch", ABOVE_THE_DISPATCHER)]
    + [("atlas.runtime", ABOVE_THE_DISPATCHER)],
)
def test_a_layer_does_not_reach_the_ones_above(importer: str, forbidden: list[str]) -> None:
    g = graph()
    reached = {}
    for imported in forbidden:
        chains = g.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
        if chains:
            reached[imported] = " -> ".join(min(chains, key=len))
    assert not reached, f"{importer} reaches the layers above it: {reached}"


def test_the_circle_finder_finds_a_circle_and_says_where() -> None:
    """The checks above can fail: a circle made on purpose is found, with its import lines."""
    g = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        g.add_module(module)
    g.add_import(importer="pkg.a", imported="pkg.b", line_number=3, line_contents="import b")
    g.add_import(importer="pkg.b", imported="pkg.a", line_number=9, line_contents="import a")
    g.add_import(importer="pkg.b", imported="pkg.c", line_number=4, line_contents="import c")
    assert circles(g) == [frozenset({"pkg.a", "pkg.b"})]
    text = describe(g, circles(g)[0])
    assert "pkg.a -> pkg.b (line 3: import b)" in text
    assert "pkg.b -> pkg.a (line 9: import a)" in text
