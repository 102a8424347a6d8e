"""Conversations: each bot's, latest first and paged; full-text search (the FTS5 search of
conversation_search, atlas/store/search.py); one conversation read page by page, each tool
call folded with its result one click away. A conversation opens at its end and pages both
ways by message id (`?before=`, `?after=`; `?after=0` is its start)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from itertools import zip_longest

from aiohttp import web

from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.conversation_reads import conversation_reads
from atlas.dashboard.names import conversation_name
from atlas.dashboard.page import Page
from atlas.dashboard.queries import (
    CONVERSATIONS_PER_PAGE,
    MESSAGES_PER_PAGE,
)
from atlas.dashboard.render import render
from atlas.home import Bot
from atlas.store.conversation_schema import Conversation
from atlas.store.conversations import ConversationStore
from atlas.store.search import MessageFilter, TextQuery, has_cjk

RESULTS_SHOWN = 20


@dataclass
class Found:
    bot: str
    conversation: Conversation
    snippet: str  # of its best matching message, matches between **…**
    message_id: int
    created_at: str
    hits: int = 1  # its messages among the best ones read
    name: str = ""  # what to call it (atlas/dashboard/names.py)


def _int(request: web.Request, name: str, default: int = 0) -> int:
    value = request.query.get(name, "")
    return int(value) if value.isdigit() else default


def _bot(dashboard: Dashboard, name: str | None) -> Bot:
    bot = dashboard.home.bots.get(name or dashboard.home.settings.main)
    if bot is None:
        raise web.HTTPNotFound(text=f"there is no bot {name!r}")
    return bot


async def _words(store: ConversationStore, bot: str, text: str) -> list[Found]:
    """One FTS5 query (conversation_search's word index and query): the best messages, grouped
    by conversation in the order of each one's best."""
    found: dict[int, Found] = {}
    for hit in await store.search(text, limit=RESULTS_SHOWN * 3):
        if hit.conversation_id in found:
            found[hit.conversation_id].hits += 1
            continue
        conversation = await store.get_conversation(hit.conversation_id)
        if conversation is not None:
            found[hit.conversation_id] = Found(
                bot, conversation, hit.snippet, hit.message_id, hit.created_at
            )
    return list(found.values())


async def _trigrams(store: ConversationStore, bot: str, query: TextQuery) -> list[Found]:
    """Text without spaces (Chinese, Japanese, Korean): the trigram index, as the tool does."""
    found = []
    where = MessageFilter(roles=("user", "assistant", "tool"))
    for match in await store.match_conversations(query, where, sort="relevance", limit=20):
        conversation = MessageFilter(where.roles, conversation_id=match.conversation.id)
        best = await store.matching_messages(query, conversation, limit=1, chars=400)
        if best:
            found.append(
                Found(
                    bot,
                    match.conversation,
                    best[0].snippet or "",
                    best[0].id,
                    best[0].created_at,
                    match.hits,
                )
            )
    return found


async def search(dashboard: Dashboard, text: str, bots: list[Bot]) -> list[Found]:
    """The best matching conversations over `bots`, each with its best message's snippet; the
    bots' results interleaved by rank (scores of different files do not compare)."""
    query = TextQuery.build(text, "trigram" if has_cjk(text) else "words")
    if query is None:
        return []

    async def one_bot(bot: Bot) -> list[Found]:
        store = await dashboard.store(bot)
        if store is None:
            return []
        if query.index == "words":
            return await _words(store, bot.name, text)
        return await _trigrams(store, bot.name, query)

    per_bot = await asyncio.gather(*(one_bot(bot) for bot in bots))
    ranked = [f for rank in zip_longest(*per_bot) for f in rank if f is not None]
    return ranked[:RESULTS_SHOWN]


async def _people(dashboard: Dashboard, bot: str) -> dict[tuple[str, str], str]:
    return await dashboard.home_reads.people(bot)


def _waiting(dashboard: Dashboard, bot: str) -> set[int]:
    """The bot's conversations whose turn waits on the person (an approval, a question)."""
    return {ask.conversation_id for ask in dashboard.asks.open() if ask.address.bot == bot}


async def conversations_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    text = request.query.get("q", "").strip()
    wanted = request.query.get("bot", "")
    if text:
        bots = [_bot(dashboard, wanted)] if wanted else list(dashboard.home.bots.values())
        results = await search(dashboard, text, bots)
        known = {bot.name: await _people(dashboard, bot.name) for bot in bots}
        for found in results:
            found.name = conversation_name(asdict(found.conversation), known[found.bot])
        return render(
            request,
            "conversations.html",
            q=text,
            bot=wanted,
            results=results,
            rows=[],
            total=0,
            offset=0,
            per_page=CONVERSATIONS_PER_PAGE,
            bots=list(dashboard.home.bots),
        )
    bot = _bot(dashboard, wanted or None)
    offset = _int(request, "offset")
    store = await dashboard.store(bot)
    rows, total = [], 0
    if store is not None:
        rows, total = await conversation_reads(store).list_conversations(
            limit=CONVERSATIONS_PER_PAGE, offset=offset
        )
        known = await _people(dashboard, bot.name)
        waiting = _waiting(dashboard, bot.name)
        for row in rows:
            row["name"] = conversation_name(row, known)
            row["waiting"] = row["id"] in waiting
    return render(
        request,
        "conversations.html",
        q="",
        bot=bot.name,
        results=None,
        rows=rows,
        total=total,
        offset=offset,
        per_page=CONVERSATIONS_PER_PAGE,
        bots=list(dashboard.home.bots),
    )


async def conversation_view(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    number = int(request.match_info["id"])
    store = await dashboard.store(bot)
    conversation = await store.get_conversation(number) if store else None
    if store is None or conversation is None:
        raise web.HTTPNotFound(text=f"bot {bot.name} has no conversation {number}")
    name = conversation_name(asdict(conversation), await _people(dashboard, bot.name))
    asks = [ask for ask in dashboard.asks.open() if ask.address.bot == bot.name]
    waiting = [ask for ask in asks if ask.conversation_id == number]
    window = await conversation_reads(store).conversation_window(
        number,
        after_id=_cursor(request, "after"),
        before_id=_cursor(request, "before"),
        limit=MESSAGES_PER_PAGE,
    )
    return render(
        request,
        "conversation.html",
        bot=bot.name,
        conversation=conversation,
        name=name,
        waiting=waiting,
        messages=window.messages,
        earlier=window.earlier,
        later=window.later,
    )


def _cursor(request: web.Request, name: str) -> int | None:
    """A message id cursor of the query (`after`, `before`); None when not given."""
    value = request.query.get(name)
    if value is None:
        return None
    if not value.isdigit():
        raise web.HTTPBadRequest(
            text=f"{name}={value!r}: a message id (a whole number) is expected"
        )
    return int(value)


async def message_view(request: web.Request) -> web.Response:
    """One message whole (a long tool result, a long answer)."""
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    number, message_id = int(request.match_info["id"]), int(request.match_info["message"])
    store = await dashboard.store(bot)
    text = await conversation_reads(store).whole_message(number, message_id) if store else None
    if text is None:
        raise web.HTTPNotFound(text=f"no message {message_id} in {bot.name}:{number}")
    return render(
        request,
        "message.html",
        bot=bot.name,
        conversation_id=number,
        message_id=message_id,
        text=text,
    )


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/conversations", conversations_page)
    router.add_get(r"/conversations/{bot}/{id:\d+}", conversation_view)
    router.add_get(r"/conversations/{bot}/{id:\d+}/messages/{message:\d+}", message_view)


PAGE = Page("Conversations", "/conversations", setup)
