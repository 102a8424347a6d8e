"""How file tools take paths from the model and name them back: the workspace is the base."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from atlas.errors import ToolError
from atlas.sandbox.view import View
from atlas.tools.fences import resolved_root
from atlas.tools.registry import RunContext

PathArg = Annotated[str, Field(description="relative to the workspace, or absolute")]


def resolve_path(run: RunContext, path: str) -> Path:
    """The absolute path meant: `~` expanded, relative paths taken from the bot's workspace,
    resolved through the bot's view (atlas/sandbox/view.py): no link in a hidden place is
    followed, and a hidden path stays hidden (the tools answer as for a missing file)."""
    if not path.strip():
        raise ToolError("path is empty")
    p = Path(path).expanduser()
    absolute = p if p.is_absolute() else run.bot.workspace / p
    return View.of(run.home, run.bot).resolve(absolute)


def shown_path(run: RunContext, resolved: Path) -> str:
    """How a path is named in answers: relative to the workspace when inside it (shorter, and it
    resolves back to the same file), absolute otherwise."""
    try:
        rel = resolved.relative_to(resolved_root(run.bot.workspace))
    except ValueError:
        return str(resolved)
    return str(rel) if rel.parts else "."


JUDGED_PATHS = "gate:resolved-paths"  # run.state.tool_state key: (tool, raw path) → resolved
# (tool, raw path) → why the gate refused it: in a call naming several files, that file fails
# alone (atlas.tools.file_batch) while the gate lets the others through.
REFUSED_PATHS = "gate:refused-paths"


def note_judged_path(run: RunContext, tool: str, raw: str, resolved: Path) -> None:
    """The gate's resolution of a call's path, for the tool to open: one resolution per call."""
    run.state.tool_state.setdefault(JUDGED_PATHS, {})[(tool, raw)] = resolved
    run.state.tool_state.get(REFUSED_PATHS, {}).pop((tool, raw), None)


def note_refused_path(run: RunContext, tool: str, raw: str, reason: str) -> None:
    """The gate refused this path of a call that names several: the tool fails it alone."""
    run.state.tool_state.setdefault(REFUSED_PATHS, {})[(tool, raw)] = reason
    run.state.tool_state.get(JUDGED_PATHS, {}).pop((tool, raw), None)


def judged_path(run: RunContext, tool: str, raw: str) -> Path:
    """The path the gate judged for this call (so a link swapped in after the check cannot
    redirect the tool), else the path resolved now (a tool run without the gate). A path the
    gate refused raises its reason."""
    if refusal := run.state.tool_state.get(REFUSED_PATHS, {}).pop((tool, raw), None):
        raise ToolError(f"refused by the approval gate: {refusal}")
    judged = run.state.tool_state.get(JUDGED_PATHS, {}).pop((tool, raw), None)
    return judged if judged is not None else resolve_path(run, raw)
