"""What conversation_search shows: the conversations a query finds, one conversation read
around a message or page by page, and the latest conversations; each sized to the answer's budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from atlas.errors import ToolError
from atlas.store.conversations import Conversation, ConversationStore
from atlas.store.search import (
    CANDIDATES,
    ConversationMatch,
    ConversationSummary,
    MessageFilter,
    SearchSort,
    StoredMessage,
    TextQuery,
    has_cjk,
)

Detail = Literal["adaptive", "full"]
MESSAGE_CHARS = 1_500  # one message inside a conversation view
READ_CHARS = 8_000  # one message when reading a conversation page by page
PREVIEW_CHARS = 300  # one message of a browsed conversation
HITS_SHOWN = 3  # matching messages shown for a conversation that is not the best one
HIT_POOL = 30  # matching messages fetched per conversation (the best one is built around them)
CONVERSATION_FETCH = 2_000  # messages of one conversation considered for a bounded view
PAGE_FETCH = 200  # messages fetched for one page of a whole conversation
BEST_SHARE = 0.6  # of the answer's budget, for the best conversation in full


@dataclass(frozen=True)
class BotStore:
    """One bot's store in a search; `qualify` shows its ids as `bot:id`."""

    bot: str
    store: ConversationStore
    qualify: bool

    def label(self, conversation_id: int) -> str:
        return f"{self.bot}:{conversation_id}" if self.qualify else str(conversation_id)


@dataclass(frozen=True)
class Search:
    """What the caller asked, parsed; `current` is the caller's own conversation."""

    query: str | None
    limit: int = 3
    sort: SearchSort | None = None
    detail: Detail = "adaptive"
    where: MessageFilter = MessageFilter()
    excluded: dict[str, tuple[int, ...]] = field(default_factory=dict)
    budget: int = 30_000
    zone: ZoneInfo = ZoneInfo("UTC")
    current: tuple[str, int] | None = None

    def filter_for(self, bot: str, conversation_id: int | None = None) -> MessageFilter:
        return MessageFilter(
            self.where.roles,
            self.where.after,
            self.where.before,
            self.excluded.get(bot, ()),
            conversation_id,
        )


# ---- rendering --------------------------------------------------------------------------------


def _when(stamp: str | None, zone: ZoneInfo) -> str:
    if not stamp:
        return "?"
    return datetime.fromisoformat(stamp).astimezone(zone).strftime("%Y-%m-%d %H:%M")


def _shows(message: StoredMessage, roles: tuple[str, ...]) -> bool:
    """An assistant message that only called tools has nothing to show unless tools are asked."""
    return bool(message.content) or bool(message.tool_names and "tool" in roles)


def message_line(message: StoredMessage, search: Search, text: str | None = None) -> str:
    who = "notice" if message.kind == "notice" else message.role
    body = message.content if text is None else text
    if text is None and message.length > len(message.content):
        body += f" … [{message.length - len(message.content)} more characters]"
    if message.tool_names and "tool" in search.where.roles:
        body = (body + "\n" if body else "") + f"(calls {', '.join(message.tool_names)})"
    return f"[#{message.id} {who} {_when(message.created_at, search.zone)}] {body}"


def conversation_header(
    where: BotStore, conversation: Conversation, search: Search, about: str
) -> str:
    place = f"{conversation.channel} {conversation.chat}"
    if conversation.thread:
        place += f" thread {conversation.thread}"
    mark = " (this conversation)" if search.current == (where.bot, conversation.id) else ""
    parts = [f"## {where.label(conversation.id)}{mark}", place]
    if conversation.kind != "conversation":
        parts.append(conversation.kind)
    if conversation.title:
        parts.append(f'"{conversation.title}"')
    parts.append(
        f"{_when(conversation.created_at, search.zone)} → "
        f"{_when(conversation.updated_at, search.zone)}"
    )
    if about:
        parts.append(about)
    return " · ".join(parts)


def _gap(count: int) -> str:
    return f"  … {count} message{'s' if count != 1 else ''} …"


def _fit(lines: list[str], budget: int) -> bool:
    return sum(len(line) + 1 for line in lines) <= budget


def bounded_view(
    messages: list[StoredMessage], focus: set[int], search: Search, budget: int
) -> tuple[list[str], int]:
    """The conversation in full if it fits `budget`, else the messages nearest the focused
    ones (fewer neighbours until it fits), gaps marked; and how many messages it shows."""
    shown = [m for m in messages if _shows(m, search.where.roles) or m.id in focus]
    lines = [message_line(m, search) for m in shown]
    if _fit(lines, budget):
        return lines, len(shown)
    centres = [i for i, m in enumerate(shown) if m.id in focus] or [0]
    for reach in (3, 2, 1, 0):
        keep = sorted({j for i in centres for j in range(i - reach, i + reach + 1)})
        keep = [j for j in keep if 0 <= j < len(shown)]
        out, previous = [], -1
        for j in keep:
            if j > previous + 1:
                out.append(_gap(j - previous - 1))
            out.append(lines[j])
            previous = j
        if previous < len(shown) - 1:
            out.append(_gap(len(shown) - 1 - previous))
        if _fit(out, budget):
            return out, len(keep)
    # Even the focused messages alone are too long: as many as fit, cut to what is left.
    out, used = [], 0
    for i in centres:
        line = lines[i][: max(0, budget - used - 1)]
        if not line:
            break
        out.append(line)
        used += len(line) + 1
    return out, len(out)


# ---- the shapes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A conversation found by a query, with its best matching messages."""

    where: BotStore
    match: ConversationMatch
    hits: list[StoredMessage]


def _pick(
    found: list[tuple[BotStore, ConversationMatch]], sort: SearchSort, limit: int
) -> list[tuple[BotStore, ConversationMatch]]:
    """The `limit` best of the matches from several stores."""
    if sort == "oldest":
        return sorted(found, key=lambda f: f[1].first_at)[:limit]
    newest_first = sorted(found, key=lambda f: f[1].last_at, reverse=True)
    if sort == "newest":
        return newest_first[:limit]
    # Stable: among equal scores and counts, the newer conversation stays first.
    return sorted(newest_first, key=lambda f: (f[1].score, -f[1].hits))[:limit]


async def _match_everywhere(
    stores: list[BotStore], query: TextQuery, search: Search, conversation_id: int | None
) -> list[tuple[BotStore, ConversationMatch]]:
    sort: SearchSort = search.sort or "relevance"
    found = []
    for where in stores:
        matches = await where.store.match_conversations(
            query, search.filter_for(where.bot, conversation_id), sort=sort, limit=search.limit
        )
        found += [(where, match) for match in matches]
    return _pick(found, sort, search.limit)


async def discover(
    stores: list[BotStore], search: Search, conversation_id: int | None = None
) -> tuple[list[Found], str]:
    """The conversations matching `search.query`, each with its best matching messages, and
    which index found them. CJK text goes to the trigram index; so does a query the word
    index finds nothing for (parts of words), when it has three characters or more."""
    text = search.query or ""
    indexes = ["trigram"] if has_cjk(text) else ["words", "trigram"]
    for index in indexes:
        query = TextQuery.build(text, index)  # type: ignore[arg-type]
        fallback = index == "trigram" and len(indexes) > 1
        if query is None or (fallback and len(text.strip()) < 3):
            continue
        matches = await _match_everywhere(stores, query, search, conversation_id)
        if matches:
            found = []
            for where, match in matches:
                where_filter = search.filter_for(where.bot, match.conversation.id)
                hits = await where.store.matching_messages(query, where_filter, limit=HIT_POOL)
                found.append(Found(where, match, hits))
            return found, index
    return [], indexes[-1]


async def _full_view(where: BotStore, found: Found, search: Search, budget: int) -> list[str]:
    messages = await where.store.read_messages(
        MessageFilter(search.where.roles, conversation_id=found.match.conversation.id),
        limit=CONVERSATION_FETCH,
        chars=MESSAGE_CHARS,
    )
    lines, shown = bounded_view(messages, {h.id for h in found.hits}, search, budget)
    total = len([m for m in messages if _shows(m, search.where.roles)])
    if shown < total or len(messages) == CONVERSATION_FETCH:
        label = where.label(found.match.conversation.id)
        lines.append(f"({shown} of {total} messages shown; conversation_id={label} reads it all)")
    return lines


async def render_discovery(found: list[Found], search: Search) -> str:
    if not found:
        return (
            f"No conversation matches {search.query!r}"
            + (" in that time range" if search.where.after or search.where.before else "")
            + ". Every word must appear; try fewer or other words."
        )
    order = {None: "best match first", "newest": "newest first", "oldest": "oldest first"}
    parts = [
        f"{len(found)} conversation(s) match {search.query!r} ({order[search.sort]}; "
        f"times in {search.zone.key})."
    ]
    rest_budget = search.budget
    for rank, item in enumerate(found):
        conversation = item.match.conversation
        in_full = search.detail == "full" or rank == 0
        about = f"{item.match.hits} matching message(s)" + (" — in full:" if in_full else ":")
        lines = [conversation_header(item.where, conversation, search, about)]
        if in_full:
            share = (
                int(search.budget * BEST_SHARE)
                if search.detail == "adaptive"
                else search.budget // len(found)
            )
            lines += await _full_view(item.where, item, search, min(share, rest_budget))
        else:
            shown = item.hits[:HITS_SHOWN]
            lines += [message_line(h, search, h.snippet) for h in shown]
            if item.match.hits > len(shown):
                lines.append(f"(+{item.match.hits - len(shown)} more matching)")
        block = "\n".join(lines)
        if len(block) > rest_budget:
            parts.append(f"(… {len(found) - rank} more conversation(s) left out to stay short)")
            break
        parts.append(block)
        rest_budget -= len(block) + 2
    labels = ", ".join(item.where.label(item.match.conversation.id) for item in found)
    hints = "conversation_id with around_message_id reads around a message"
    if len(found) == search.limit:
        hints = f"exclude_conversation_ids=[{labels}] finds more; " + hints
    if older := _older_page(found, search):
        hints = older + "; " + hints
    parts.append(f"Next: {hints}.")
    return "\n\n".join(parts)


def _older_page(found: list[Found], search: Search) -> str | None:
    """Where the next page starts when more messages matched than a search ranks (the newest
    CANDIDATES of each bot): before the newest of the bots' bounds, so nothing is skipped."""
    bounds = [item.match.bounded_at for item in found if item.match.bounded_at]
    if not bounds:
        return None
    if search.sort == "oldest":
        return (
            f"only the oldest {CANDIDATES:,} matching messages were ranked: after={min(bounds)} "
            "searches the later ones"
        )
    return (
        f"only the newest {CANDIDATES:,} matching messages were ranked: before={max(bounds)} "
        "searches the older ones"
    )


async def read_around(
    where: BotStore, conversation: Conversation, message_id: int, window: int, search: Search
) -> str:
    chars = search.budget if window == 0 else MESSAGE_CHARS
    anchor = await where.store.get_message(message_id, chars=chars)
    label = where.label(conversation.id)
    if anchor is None or anchor.conversation_id != conversation.id:
        raise ToolError(f"message {message_id} is not in conversation {label}")
    scope = MessageFilter(search.where.roles, conversation_id=conversation.id)
    earlier = await where.store.read_messages(
        scope, before_id=message_id, newest_first=True, limit=window + 1, chars=chars
    )
    later = await where.store.read_messages(
        scope, after_id=message_id, limit=window + 1, chars=chars
    )
    more_before, more_after = len(earlier) > window, len(later) > window
    messages = [*reversed(earlier[:window]), anchor, *later[:window]]
    lines, _ = bounded_view(messages, {message_id}, search, search.budget - 500)
    head = conversation_header(where, conversation, search, f"around message #{message_id}:")
    hints = []
    if more_before and messages:
        hints.append(f"earlier: around_message_id={messages[0].id}")
    if more_after and messages:
        hints.append(f"later: around_message_id={messages[-1].id}")
    tail = [f"Next: {'; '.join(hints)}."] if hints else ["(that is the whole conversation)"]
    return "\n".join([head, *lines, *tail])


async def read_whole(
    where: BotStore, conversation: Conversation, offset: int, search: Search
) -> str:
    scope = search.filter_for(where.bot, conversation.id)
    summary = await where.store.summarise_conversations(
        MessageFilter(scope.roles, scope.after, scope.before),
        sort="newest",
        limit=1,
        ids=[conversation.id],
    )
    total = summary[0].messages if summary else 0
    newest_first = search.sort == "newest"
    head = conversation_header(
        where,
        conversation,
        search,
        f"{total} message(s)" + (" newest first" if newest_first else ""),
    )
    rows = await where.store.read_messages(
        scope, offset=offset, limit=PAGE_FETCH, newest_first=newest_first, chars=READ_CHARS
    )
    lines, used, taken = [], len(head) + 200, 0
    for message in rows:
        line = message_line(message, search) if _shows(message, search.where.roles) else ""
        if line and used + len(line) + 1 > search.budget and taken:
            break
        if line:
            lines.append(line[: search.budget - used])
            used += len(line) + 1
        taken += 1
    if newest_first:
        lines.reverse()  # a page reads in time order even when paging back from the end
    if not rows:
        tail = f"(no messages{' from offset ' + str(offset) if offset else ''})"
    else:
        tail = f"(messages {offset + 1}–{offset + taken} of {total}"
        tail += f"; next page: offset={offset + taken})" if offset + taken < total else ")"
    return "\n".join([head, *lines, tail])


async def _browsed(
    where: BotStore, summary: ConversationSummary, search: Search, budget: int
) -> str:
    """One listed conversation: whole within `budget` (detail full), else its first message and
    its last two."""
    conversation = summary.conversation
    lines = [conversation_header(where, conversation, search, f"{summary.messages} message(s)")]
    scope = MessageFilter(search.where.roles, conversation_id=conversation.id)
    if search.detail == "full":
        messages = await where.store.read_messages(
            scope, limit=CONVERSATION_FETCH, chars=MESSAGE_CHARS
        )
        lines += bounded_view(messages, set(), search, budget)[0]
    else:
        first = await where.store.read_messages(scope, limit=1, chars=PREVIEW_CHARS)
        last = await where.store.read_messages(
            scope, limit=2, newest_first=True, chars=PREVIEW_CHARS
        )
        seen = {m.id for m in first}
        preview = first + [m for m in reversed(last) if m.id not in seen]
        for i, message in enumerate(preview):
            if i == 1 and summary.messages > len(preview):
                lines.append(_gap(summary.messages - len(preview)))
            lines.append(message_line(message, search))
    return "\n".join(lines)


async def browse(stores: list[BotStore], search: Search) -> str:
    sort: SearchSort = search.sort or "newest"
    found = []
    for where in stores:
        summaries = await where.store.summarise_conversations(
            search.filter_for(where.bot), sort=sort, limit=search.limit
        )
        found += [(where, s) for s in summaries]
    newest = sort != "oldest"
    found.sort(
        key=lambda f: f[1].conversation.updated_at if newest else f[1].conversation.created_at,
        reverse=newest,
    )
    found = found[: search.limit]
    if not found:
        return "No conversations" + (
            " in that time range." if search.where.after or search.where.before else " yet."
        )
    parts = [
        f"{len(found)} conversation(s), {'latest' if newest else 'oldest'} first "
        f"(times in {search.zone.key})."
    ]
    budget = (search.budget - 300) // len(found)
    parts += [await _browsed(where, summary, search, budget) for where, summary in found]
    labels = ", ".join(where.label(s.conversation.id) for where, s in found)
    more = f" exclude_conversation_ids=[{labels}] lists more;" if len(found) == search.limit else ""
    parts.append(f"Next:{more} conversation_id reads one.")
    return "\n\n".join(parts)
