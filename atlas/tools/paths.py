"""How file tools take paths from the model and name them back: the workspace is the base."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from atlas.errors import ToolError
from atlas.tools.registry import RunContext

PathArg = Annotated[str, Field(description="relative to the workspace, or absolute")]


def resolve_path(run: RunContext, path: str) -> Path:
    """The absolute path meant: `~` expanded, relative paths taken from the bot's workspace."""
    if not path.strip():
        raise ToolError("path is empty")
    p = Path(path).expanduser()
    return (p if p.is_absolute() else run.bot.workspace / p).resolve()


def shown_path(run: RunContext, resolved: Path) -> str:
    """How a path is named in answers: relative to the workspace when inside it (shorter, and it
    resolves back to the same file), absolute otherwise."""
    try:
        rel = resolved.relative_to(run.bot.workspace.resolve())
    except ValueError:
        return str(resolved)
    return str(rel) if rel.parts else "."
