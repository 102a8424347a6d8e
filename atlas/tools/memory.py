"""memory: two note files, USER.md (who the user is) and MEMORY.md (what the bot learned).

USER.md is the home's profile of the user, `<home>/USER.md`, shared by every bot: what one bot
learns about the user, all of them know. MEMORY.md is each bot's own, `bots/<name>/memory/`.

A file is a list of entries, one per paragraph: entries are separated by a blank line, and a blank
line inside new content is folded to a single line break so an entry stays one paragraph. The
files are read into the system prompt when a conversation starts, so a change shows from the next
conversation on.

A call's operations apply together or not at all: they run on a copy, the result is checked
against the file's limit once at the end, and the file is replaced atomically. The read, the
change and the replace happen under a file lock (atlas/locks.py), so two bots, or two processes,
writing the shared USER.md at once never lose each other's update.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from atlas.errors import ToolError
from atlas.locks import held
from atlas.tools.registry import RunContext, Tool, tool
from atlas.trust.threats import scan

Target = Literal["user", "memory"]
Action = Literal["add", "replace", "remove"]


@dataclass(frozen=True)
class MemoryFile:
    file_name: str
    limit: int  # characters of the whole file


MEMORY_FILES: dict[str, MemoryFile] = {
    "user": MemoryFile("USER.md", 1_375),
    "memory": MemoryFile("MEMORY.md", 2_200),
}
ENTRY_SEPARATOR = "\n\n"
PREVIEW_CHARS = 60


class MemoryOperation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Action
    content: str = Field("", validation_alias=AliasChoices("content", "new_text"))
    old_text: str = ""


# ---- entries ----------------------------------------------------------------------------------


def read_entries(path: Path) -> list[str]:
    """The entries of a memory file (paragraphs), empty when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [e.strip() for e in re.split(r"\n\s*\n", text) if e.strip()]


def render(entries: list[str]) -> str:
    return ENTRY_SEPARATOR.join(entries) + ("\n" if entries else "")


def _size(entries: list[str]) -> int:
    return len(ENTRY_SEPARATOR.join(entries))


def _preview(entry: str) -> str:
    flat = " ".join(entry.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _entry_content(content: str, where: str) -> str:
    if not content.strip():
        raise ToolError(f"{where}: give `content`, the text of the entry")
    if reason := scan(content):
        raise ToolError(f"{where}: refused, {reason}; memory is read as your own instructions")
    return re.sub(r"\n\s*\n+", "\n", content.strip())  # one entry stays one paragraph


def _find(entries: list[str], old_text: str, where: str) -> int:
    if not old_text.strip():
        raise ToolError(f"{where}: give `old_text`, a unique part of the entry to change")
    hits = [i for i, e in enumerate(entries) if old_text.strip() in e]
    if not hits:
        raise ToolError(f"{where}: no entry contains old_text {_preview(old_text)!r}")
    if len(hits) > 1:
        found = "; ".join(repr(_preview(entries[i])) for i in hits)
        raise ToolError(
            f"{where}: old_text {_preview(old_text)!r} is in {len(hits)} entries ({found}); "
            "quote more of the one you mean"
        )
    return hits[0]


def apply_operations(
    entries: list[str], operations: list[MemoryOperation]
) -> tuple[list[str], str]:
    """The entries after every operation, and a summary; raises ToolError naming the first fault."""
    result = list(entries)
    done: list[str] = []
    for number, op in enumerate(operations, 1):
        where = f"operation {number} ({op.action})"
        if op.action == "add":
            content = _entry_content(op.content, where)
            if content in result:
                done.append("1 add skipped (already there)")
                continue
            result.append(content)
            done.append("added 1 entry")
        elif op.action == "replace":
            index = _find(result, op.old_text, where)
            result[index] = _entry_content(op.content, where)
            done.append("replaced 1 entry")
        else:
            # `remove` with only content names the entry by its text: take it as old_text
            del result[_find(result, op.old_text or op.content, where)]
            done.append("removed 1 entry")
    return result, ", ".join(done)


def _over_limit(name: str, limit: int, before: list[str], after: list[str]) -> str:
    size = _size(after)
    largest = sorted(before, key=len, reverse=True)[:5]
    trim = "\n".join(f"  {len(e):>5} chars: {_preview(e)!r}" for e in largest) or "  (empty)"
    return (
        f"{name} would be {size:,} characters, over its {limit:,} limit by {size - limit:,}; "
        f"nothing was changed. It holds {_size(before):,} characters in {len(before)} entries; "
        f"the largest:\n{trim}\nShorten or remove entries (replace/remove with old_text) in the "
        "same call as the addition, or write less."
    )


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- the tool ---------------------------------------------------------------------------------


def _refuse_joined_threat(file_name: str, before: list[str], after: list[str]) -> None:
    """Each entry is scanned alone; the file is read whole, so entries that only together read
    as an injection ("ignore all" + "previous instructions") are refused too. A file that was
    flagged already (written before the scan knew a spelling) does not block other changes."""
    if after == before or not (reason := scan(render(after))) or scan(render(before)):
        return
    raise ToolError(
        f"refused: with this change {file_name} as a whole reads as an injection ({reason}); "
        "memory is read as your own instructions"
    )


def _not_for_subagents(run: RunContext) -> str | None:
    return "not available to subagents" if run.run_kind == "subagent" else None


def memory_path(run: RunContext, target: str) -> Path:
    """Where a target's file lives: the home's shared profile, or the bot's own notes."""
    if target == "user":
        return run.home.user_profile_path
    return run.bot.memory_dir / MEMORY_FILES[target].file_name


def change_file(path: Path, spec: MemoryFile, operations: list[MemoryOperation]) -> str:
    """Apply a call's operations to one file under its lock; the answer, or ToolError."""
    with held(path):
        before = read_entries(path)
        after, summary = apply_operations(before, operations)
        _refuse_joined_threat(spec.file_name, before, after)
        # A file already over its limit (a merge of several bots' profiles) may still be
        # trimmed: only a change that leaves it over the limit and larger is refused.
        if _size(after) > spec.limit and _size(after) > _size(before):
            raise ToolError(_over_limit(spec.file_name, spec.limit, before, after))
        if after != before:
            _write_atomically(path, render(after))
    size = _size(after)
    over = " Over the limit: shorten or remove entries." if size > spec.limit else ""
    return (
        f"{spec.file_name}: {summary}; now {size:,}/{spec.limit:,} characters "
        f"({size * 100 // spec.limit}%), {len(after)} entries. Shown from the next "
        f"conversation.{over}"
    )


def rewrite_file(path: Path, spec: MemoryFile, text: str) -> str:
    """The person's own edit of a whole memory file (the dashboard): each entry (paragraph)
    passes the scan the tool's entries pass, the file the joined scan and the limit, under the
    same lock; ToolError says why it was refused and nothing is written then."""
    wanted = [e.strip() for e in re.split(r"\n\s*\n", text) if e.strip()]
    with held(path):
        before = read_entries(path)
        after = [_entry_content(e, f"entry {n}") for n, e in enumerate(wanted, 1)]
        _refuse_joined_threat(spec.file_name, before, after)
        if _size(after) > spec.limit and _size(after) > _size(before):
            raise ToolError(_over_limit(spec.file_name, spec.limit, before, after))
        if after != before:
            _write_atomically(path, render(after))
    size = _size(after)
    return f"{spec.file_name} saved: {size:,}/{spec.limit:,} characters, {len(after)} entries."


@tool(aliases={"new_text": "content"}, available=_not_for_subagents)
async def memory(
    run: RunContext,
    target: Target,
    operations: list[MemoryOperation] | None = None,
    action: Action | None = None,
    content: str = "",
    old_text: str = "",
) -> str:
    """Durable notes, in your system prompt from the next conversation. target user: who the
    user is, preferences (1,375 chars), shared by every bot of this home; memory: your own
    lessons, facts about tools and setup (2,200). One entry per paragraph. add: content;
    replace: the entry holding old_text becomes content; remove: the entry holding old_text.
    Several changes: `operations`, applied all or none. Not for task progress."""
    spec = MEMORY_FILES[target]
    if operations and action:
        raise ToolError("give either `operations` or a single `action`, not both")
    if not operations:
        if action is None:
            raise ToolError("give `action` (add, replace, remove) or a list of `operations`")
        operations = [MemoryOperation(action=action, content=content, old_text=old_text)]
    elif content or old_text:
        raise ToolError("with `operations`, put content and old_text inside each operation")
    # The registry hands nested models over as dicts (model_dump): make them models again.
    operations = [MemoryOperation.model_validate(op) for op in operations]
    # In a thread: the lock may wait for another process, and the event loop must not.
    return await asyncio.to_thread(change_file, memory_path(run, target), spec, operations)


MEMORY_TOOLS: list[Tool] = [memory]
