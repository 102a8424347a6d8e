"""plan: a todo list for long work, one item in progress at a time.

The plan lives in the conversation's tool state. Every result is the whole plan, in a text form
that `parse_plan` reads back, so a resumed conversation (whose state was lost with a restart)
rebuilds the plan from the last plan result in its stored history; nothing else is persisted.

    Plan (1/3 completed, 1 in progress):
    [x] 1: Read the API docs
    [>] 2: Write the client
      [ ] 2.1: Tests for the client
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from atlas.errors import ToolError
from atlas.skills.library import count_tokens
from atlas.tools.registry import RunContext, Tool, tool

Status = Literal["pending", "in_progress", "completed", "cancelled"]
MARKS: dict[str, str] = {"pending": " ", "in_progress": ">", "completed": "x", "cancelled": "-"}
STATUS_OF_MARK = {mark: status for status, mark in MARKS.items()}
OPEN = ("pending", "in_progress")
MAX_ITEMS = 100
MAX_CONTENT_CHARS = 200  # 100 items stay under the loop's 30,000-character result limit
CARRIED_TOKENS = 5_000
ID_PATTERN = r"[A-Za-z0-9_.\-]{1,40}"
_HEADER = re.compile(r"^Plan \(")
_LINE = re.compile(
    rf"^(?P<indent>(?:  )*)\[(?P<mark>[ >x-])\] (?P<id>{ID_PATTERN}): (?P<content>.*)$"
)
_PLAN_KEY = "plan"


@dataclass
class Todo:
    id: str
    content: str
    status: Status = "pending"
    parent: str | None = None


class TodoUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    # Claude Code's TodoWrite sends no id (the list is always whole): numbered by position.
    id: Annotated[str, Field(pattern=f"^({ID_PATTERN})?$")] = ""
    content: str = ""
    status: Status | None = None
    parent: str = ""
    # Claude Code's "Running the tests" form of an item: accepted, not kept (the plan shows
    # the content and the status).
    active_form: SkipJsonSchema[str] = Field(
        "", validation_alias=AliasChoices("active_form", "activeForm")
    )


# ---- text form --------------------------------------------------------------------------------


def _depths(todos: list[Todo]) -> dict[str, int]:
    by_id = {t.id: t for t in todos}
    depths: dict[str, int] = {}
    for t in todos:
        depth, node = 0, t
        while node.parent and node.parent in by_id and depth < len(todos):
            depth, node = depth + 1, by_id[node.parent]
        depths[t.id] = depth
    return depths


def render(todos: list[Todo]) -> str:
    """The plan as text; `parse_plan` reads it back."""
    if not todos:
        return "Plan (empty)."
    done = sum(t.status == "completed" for t in todos)
    active = sum(t.status == "in_progress" for t in todos)
    cancelled = sum(t.status == "cancelled" for t in todos)
    counts = f"{done}/{len(todos)} completed, {active} in progress"
    if cancelled:
        counts += f", {cancelled} cancelled"
    depths = _depths(todos)
    lines = [f"{'  ' * depths[t.id]}[{MARKS[t.status]}] {t.id}: {t.content}" for t in todos]
    return f"Plan ({counts}):\n" + "\n".join(lines)


def parse_plan(text: str) -> list[Todo] | None:
    """The plan in a plan result, or None when `text` is not one."""
    lines = text.strip().splitlines()
    if not lines or not _HEADER.match(lines[0]):
        return None
    todos: list[Todo] = []
    stack: list[str] = []  # ids of the open ancestors, by depth
    for line in lines[1:]:
        match = _LINE.match(line)
        if not match:
            return None
        depth = len(match["indent"]) // 2
        del stack[depth:]
        parent = stack[-1] if stack else None
        todos.append(Todo(match["id"], match["content"], STATUS_OF_MARK[match["mark"]], parent))
        stack.append(match["id"])
    return todos


# ---- rules ------------------------------------------------------------------------------------


def _tree_order(todos: list[Todo]) -> list[Todo]:
    """Children right after their parent, siblings in the order given."""
    children: dict[str | None, list[Todo]] = {}
    for t in todos:
        children.setdefault(t.parent, []).append(t)
    ordered: list[Todo] = []

    def visit(parent: str | None) -> None:
        for child in children.get(parent, []):
            ordered.append(child)
            visit(child.id)

    visit(None)
    return ordered


def _check(todos: list[Todo]) -> list[Todo]:
    ids = [t.id for t in todos]
    if len(todos) > MAX_ITEMS:
        raise ToolError(f"a plan holds at most {MAX_ITEMS} items ({len(todos)} given)")
    if duplicates := sorted({i for i in ids if ids.count(i) > 1}):
        raise ToolError(f"ids must be unique; repeated: {', '.join(duplicates)}")
    by_id = {t.id: t for t in todos}
    for t in todos:
        if t.parent is not None and t.parent not in by_id:
            raise ToolError(f"item {t.id}: parent {t.parent!r} is not in the plan")
    for t in todos:
        node, steps = t, 0
        while node.parent is not None:
            node, steps = by_id[node.parent], steps + 1
            if steps > len(todos):
                raise ToolError(f"item {t.id}: its parents form a loop")
    active = [t.id for t in todos if t.status == "in_progress"]
    if len(active) > 1:
        raise ToolError(
            f"{len(active)} items in progress ({', '.join(active)}); one at a time: "
            "complete or pause the others (status pending)"
        )
    return _tree_order(todos)


def _content(update: TodoUpdate) -> str:
    text = " ".join(update.content.split())  # one line each: the text form is line-based
    if len(text) > MAX_CONTENT_CHARS:
        raise ToolError(f"item {update.id}: content over {MAX_CONTENT_CHARS} characters")
    return text


def updated(current: list[Todo], updates: list[TodoUpdate], merge: bool) -> list[Todo]:
    """The plan after `updates`: the new list, or (merge) current items changed by id."""
    result = [Todo(t.id, t.content, t.status, t.parent) for t in current] if merge else []
    by_id = {t.id: t for t in result}
    for update in updates:
        item = by_id.get(update.id)
        if item is None:
            if not update.content.strip():
                raise ToolError(f"item {update.id} is new: give its content")
            item = Todo(update.id, "")
            by_id[update.id] = item
            result.append(item)
        elif not merge:
            raise ToolError(f"ids must be unique; repeated: {update.id}")
        if update.content.strip():
            item.content = _content(update)
        if update.status is not None:
            item.status = update.status
        if update.parent:
            if update.parent == update.id:
                raise ToolError(f"item {update.id} cannot be its own parent")
            item.parent = update.parent
    return _check(result)


# ---- state ------------------------------------------------------------------------------------


async def current_plan(run: RunContext) -> list[Todo]:
    """The conversation's plan, rebuilt from its last plan result after a restart."""
    state = run.state.tool_state
    if _PLAN_KEY not in state:
        state[_PLAN_KEY] = await _plan_from_history(run)
    return state[_PLAN_KEY]


async def _plan_from_history(run: RunContext) -> list[Todo]:
    if run.open_store is None:
        return []
    store = await run.open_store(run.bot)
    for message in reversed(await store.history(run.conversation_id)):
        if message.role == "tool" and message.name == "plan":
            todos = parse_plan(message.content)
            if todos is not None:
                return todos
    return []


async def carried_plan(run: RunContext) -> str | None:
    """The open items (in progress, pending) for compaction to carry over, within 5,000 tokens."""
    todos = await current_plan(run)
    open_items = [t for t in todos if t.status in OPEN]
    if not open_items:
        return None
    lines = [f"[{MARKS[t.status]}] {t.id}: {t.content}" for t in open_items]
    header = f"Open plan items ({len(open_items)} of {len(todos)}):"
    text = "\n".join([header, *lines])
    while count_tokens(text) > CARRIED_TOKENS and len(lines) > 1:
        lines.pop()
        text = "\n".join([header, *lines, "… more; call plan to read it whole"])
    return text


# ---- the tool ---------------------------------------------------------------------------------


@tool(carried=True, deferred=True)
async def plan(
    run: RunContext,
    todos: list[TodoUpdate] | None = None,
    merge: Annotated[bool, Field(description="update items by id, keep the rest")] = False,
) -> str:
    """Your plan for multi-step work. todos: {id, content, status: pending|in_progress|completed|
    cancelled, parent: id of the item it belongs to}. Without merge the list replaces the plan;
    with merge, items update by id (give only what changes) and new ids are added. One item in
    progress at a time; mark it completed as soon as it is done. No arguments: read the plan."""
    todos_now = await current_plan(run)
    if todos is None:
        return render(todos_now)
    # The registry hands nested models over as dicts (model_dump): make them models again.
    items = [TodoUpdate.model_validate(t) for t in todos]
    for position, item in enumerate(items, 1):
        if not item.id:
            if merge:
                raise ToolError(f"item {position} has no id: with merge, items update by id")
            item.id = str(position)
    new = updated(todos_now, items, merge)
    run.state.tool_state[_PLAN_KEY] = new
    return render(new)


PLAN_TOOLS: list[Tool] = [plan]
