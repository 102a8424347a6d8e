"""Several files in one call: read_file's `reads`, write_file's `files`, edit_file's `edits`.

Each entry is the arguments of a single call. The entries run in order, each one applying or
failing alone, and the answer reports each. Edits go file by file: a file's edits apply in
order, all or none (a failed edit leaves that file as it was and the other files standing). A
file named twice in `files` is refused: which content should win is the model's to say. The gate
judges every path of the call (atlas.trust.policy): a path it refuses fails alone, with the
gate's reason, through `entry_path`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from atlas.errors import ToolError
from atlas.tools.paths import judged_path
from atlas.tools.registry import RunContext

MAX_ENTRIES = 20  # files in one call: each answer is a section of one result
BATCH_KEYS = ("reads", "files", "edits")
MAX_LINES = 2000


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


class ReadEntry(_Entry):
    offset: Annotated[int, Field(ge=1)] = 1
    limit: Annotated[int, Field(ge=1, le=MAX_LINES)] = MAX_LINES


class WriteEntry(_Entry):
    content: str


class EditEntry(_Entry):
    path: str = ""  # none: the call's `path` (Claude Code's MultiEdit shape)
    old_string: str
    new_string: str
    replace_all: bool = False


def entries_field(description: str) -> Any:
    return Field(max_length=MAX_ENTRIES, description=description)


def called_paths(args: dict[str, Any]) -> list[str]:
    """Every path a file tool's validated arguments name: `path`, and each entry's."""
    paths = [args["path"]] if args.get("path") else []
    for key in BATCH_KEYS:
        paths.extend(entry["path"] for entry in args.get(key) or () if entry.get("path"))
    return paths


def single_or_batch(path: str, entries: Sequence[Any], key: str) -> bool:
    """True for a batch call; refuses a call that gives both shapes, or neither. Edits may
    leave their path to the call's (Claude Code's MultiEdit: one file, several edits)."""
    if entries and path and (key != "edits" or any(e.get("path") for e in entries)):
        raise ToolError(f"give either path or {key}, not both")
    if not entries and not path:
        raise ToolError(f"path is required (or {key}, for several files)")
    return bool(entries)


def refuse_repeats(entries: Sequence[_Entry], key: str) -> None:
    """A path given twice in one batch is a mistake to name, not to settle silently."""
    seen: set[str] = set()
    for entry in entries:
        if _same_file_key(entry.path) in seen:
            raise ToolError(f"{entry.path} is named twice in {key}; give each file once")
        seen.add(_same_file_key(entry.path))


def per_file(entries: Sequence[EditEntry]) -> dict[str, list[EditEntry]]:
    """The edits grouped by file, files in the order first named, edits in their order."""
    groups: dict[str, list[EditEntry]] = {}
    for entry in entries:
        groups.setdefault(_same_file_key(entry.path), []).append(entry)
    return groups


def _same_file_key(path: str) -> str:
    """`a.txt`, `./a.txt` and `src/../a.txt` name one file (symlinks are the gate's to
    resolve, per entry)."""
    return os.path.normpath(path)


@dataclass(frozen=True)
class Outcome:
    shown: str
    text: str
    failed: bool = False


class EntryPaths:
    """Each distinct path of a batch resolved once, as the gate judged it (or refused it):
    two entries on one file meet the same file, and a refusal holds for both."""

    def __init__(self, run: RunContext, tool: str) -> None:
        self.run, self.tool = run, tool
        self._resolved: dict[str, Path | ToolError] = {}

    def __call__(self, raw: str) -> Path:
        if raw not in self._resolved:
            try:
                self._resolved[raw] = judged_path(self.run, self.tool, raw)
            except ToolError as exc:
                self._resolved[raw] = exc
        found = self._resolved[raw]
        if isinstance(found, ToolError):
            raise found
        return found


Entry = TypeVar("Entry", bound=_Entry)


async def run_each(
    entries: Sequence[Entry], one: Callable[[Entry], Awaitable[Outcome]]
) -> list[Outcome]:
    """Each entry in order; a ToolError fails that entry only."""
    outcomes: list[Outcome] = []
    for entry in entries:
        try:
            outcomes.append(await one(entry))
        except ToolError as exc:
            outcomes.append(Outcome(entry.path, f"Error: {exc}", failed=True))
    return outcomes


def report(done: str, outcomes: list[Outcome]) -> str:
    """One section per entry, under a line that counts what applied and what failed. When
    every entry failed the whole call is an error (the loop guards count it as one)."""
    failed = sum(o.failed for o in outcomes)
    head = f"{len(outcomes) - failed} of {len(outcomes)} {done}"
    head += f"; {failed} failed (the others stand)." if failed else "."
    sections = [f"=== {o.shown}{' (failed)' if o.failed else ''} ===\n{o.text}" for o in outcomes]
    text = "\n\n".join([head, *sections])
    if failed == len(outcomes):
        raise ToolError(text)
    return text
