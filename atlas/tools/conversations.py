"""conversation_search: find, scroll and read past conversations, with FTS5 and no model.

The main agent searches every bot's store, any other bot only its own. Conversation ids belong
to a bot's store, so another bot's conversation is shown (and given back) as `bot:id`.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo

from pydantic import Field

from atlas.errors import ToolError
from atlas.store.search import DEFAULT_ROLES, MessageFilter
from atlas.tools.conversation_views import (
    BotStore,
    Found,
    Search,
    browse,
    conversation_header,
    discover,
    message_line,
    read_around,
    read_whole,
    render_discovery,
)
from atlas.tools.registry import RunContext, tool

ROLES = ("user", "assistant", "tool")
_RELATIVE = re.compile(r"(\d+)\s*(h|d|w)")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


# ---- arguments --------------------------------------------------------------------------------


def parse_when(text: str, zone: ZoneInfo, now: datetime, *, name: str) -> datetime:
    """`7d`, `24h`, `2w` (before now), an ISO date (midnight in `zone`) or an ISO date-time
    (in `zone` unless it names its own offset)."""
    value = text.strip()
    if relative := _RELATIVE.fullmatch(value.lower()):
        return now - timedelta(**{_UNITS[relative[2]]: int(relative[1])})
    try:
        return datetime.combine(date.fromisoformat(value), time(), zone)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(
            f"{name}={text!r} is not a date: give an ISO date (2024-05-01), a date-time "
            "(2024-05-01T14:30) or a span back from now (7d, 24h, 2w)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def _utc_iso(moment: datetime) -> str:
    # The store's timestamps are UTC ISO strings with microseconds: same form, so they compare.
    return moment.astimezone(ZoneInfo("UTC")).isoformat(timespec="microseconds")


def parse_roles(text: str) -> tuple[str, ...]:
    roles = tuple(dict.fromkeys(r for r in re.split(r"[\s,]+", text.lower()) if r))
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise ToolError(
            f"role_filter={text!r}: use a comma list of {', '.join(ROLES)} (e.g. 'user,assistant')"
        )
    return roles


# ---- scope ------------------------------------------------------------------------------------


async def _stores(run: RunContext) -> dict[str, BotStore]:
    """The stores this run may search: every bot's for the main agent, else its own."""
    if run.open_store is None:
        raise ToolError("conversation_search needs the runtime's conversation stores")
    bots = list(run.home.bots.values()) if run.bot.is_main else [run.bot]
    stores = {}
    for bot in bots:
        # A bot that never talked has no file; opening one would create it. On PostgreSQL
        # every bot's conversations are in the one database.
        on_postgres = run.home.settings.store.url is not None
        if bot.name == run.bot.name or on_postgres or bot.db_path.exists():
            store = await run.open_store(bot)
            stores[bot.name] = BotStore(bot.name, store, qualify=bot.name != run.bot.name)
    return stores


def _reference(run: RunContext, value: int | str, stores: dict[str, BotStore]) -> tuple[str, int]:
    """A conversation id as shown (`12` or `research:12`) → (bot, id)."""
    text = str(value).strip().lstrip("#")
    bot, _, number = text.rpartition(":")
    bot = bot or run.bot.name
    if not number.isdigit():
        raise ToolError(f"conversation id {value!r} is not an id like 12 or research:12")
    if bot != run.bot.name and not run.bot.is_main:
        raise ToolError(
            f"conversation {text} belongs to bot {bot!r}; bot {run.bot.name!r} can search "
            "only its own conversations"
        )
    if bot not in stores:
        if bot in run.home.bots:
            raise ToolError(f"bot {bot!r} has no conversations yet")
        raise ToolError(f"there is no bot {bot!r} (bots: {', '.join(run.home.bots)})")
    return bot, int(number)


def _time_range(run: RunContext, after: str | None, before: str | None) -> tuple[str | None, ...]:
    zone = ZoneInfo(run.settings.timezone)
    now = datetime.now(zone)
    start = parse_when(after, zone, now, name="after") if after else None
    end = parse_when(before, zone, now, name="before") if before else None
    if start and end and start >= end:
        raise ToolError(f"after={after!r} is not earlier than before={before!r}")
    return (_utc_iso(start) if start else None, _utc_iso(end) if end else None)


@tool(deferred=True, read_only=True, pages_itself=True)
async def conversation_search(
    run: RunContext,
    query: Annotated[str | None, Field(description="words, all must match")] = None,
    conversation_id: Annotated[int | str | None, Field(description="id as shown")] = None,
    around_message_id: int | None = None,
    window: Annotated[int, Field(ge=0, le=20, description="messages each side")] = 5,
    offset: Annotated[int, Field(ge=0, description="messages to skip reading one")] = 0,
    limit: Annotated[int, Field(ge=1, le=10, description="conversations")] = 3,
    sort: Literal["newest", "oldest"] | None = None,
    detail: Literal["adaptive", "full"] = "adaptive",
    after: Annotated[str | None, Field(description="ISO date or 7d, 24h, 2w")] = None,
    before: str | None = None,
    exclude_conversation_ids: list[int | str] | None = None,
    role_filter: Annotated[str, Field(description="add tool for tool output")] = "user,assistant",
) -> str:
    """Search past conversations (full text, accents ignored). query: the best in full, others by
    matching messages. conversation_id: read it (paged by offset), or around_message_id in it.
    Neither: the latest conversations."""
    if around_message_id is not None and conversation_id is None:
        raise ToolError("around_message_id needs the conversation_id it belongs to")
    if around_message_id is not None and query:
        raise ToolError("give query to search, or around_message_id to scroll; not both")
    stores = await _stores(run)
    roles = parse_roles(role_filter)
    start, end = _time_range(run, after, before)
    excluded: dict[str, list[int]] = {}
    for value in exclude_conversation_ids or []:
        bot, number = _reference(run, value, stores)
        excluded.setdefault(bot, []).append(number)
    search = Search(
        query=query.strip() if query and query.strip() else None,
        limit=limit,
        sort=sort,
        detail=detail,
        where=MessageFilter(roles, start, end),
        excluded={bot: tuple(ids) for bot, ids in excluded.items()},
        budget=run.settings.limits.tool_result_chars,
        zone=ZoneInfo(run.settings.timezone),
        current=(run.bot.name, run.conversation_id),
    )
    answer = await _answer(run, stores, search, conversation_id, around_message_id, window, offset)
    if len(answer) > search.budget:  # the views are sized to fit; this is the backstop
        answer = answer[: search.budget - 80] + "\n(cut here to stay short: ask for less)"
    return answer


async def _answer(
    run: RunContext,
    stores: dict[str, BotStore],
    search: Search,
    conversation_id: int | str | None,
    around_message_id: int | None,
    window: int,
    offset: int,
) -> str:
    """The shape the arguments ask for: browse, discover, scroll or read."""
    if conversation_id is None:
        if search.query is None:
            return await browse(list(stores.values()), search)
        found, _ = await discover(list(stores.values()), search)
        return await render_discovery(found, search)
    bot, number = _reference(run, conversation_id, stores)
    where = stores[bot]
    conversation = await where.store.get_conversation(number)
    if conversation is None:
        raise ToolError(f"there is no conversation {where.label(number)}")
    if around_message_id is not None:
        return await read_around(where, conversation, around_message_id, window, search)
    if search.query is not None:
        found, _ = await discover([where], search, conversation_id=number)
        return await render_discovery(found, search)
    return await read_whole(where, conversation, offset, search)


CONVERSATION_TOOLS = [conversation_search]
# The views are importable from here too (atlas/search_cli.py and scripts/bench_search.py).
__all__ = [
    "CONVERSATION_TOOLS",
    "DEFAULT_ROLES",
    "BotStore",
    "Found",
    "Search",
    "conversation_header",
    "conversation_search",
    "discover",
    "message_line",
    "render_discovery",
]
