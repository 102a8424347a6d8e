"""`atlas search QUERY [--bot NAME] [--json]`: conversation search from the shell."""

from __future__ import annotations

import json
import sys
from typing import Any
from zoneinfo import ZoneInfo

from atlas.home import Home
from atlas.store.conversations import MessageFilter
from atlas.store.home_engines import HomeEngines
from atlas.tools.conversations import (
    BotStore,
    Found,
    Search,
    conversation_header,
    discover,
    message_line,
)

CLI_LIMIT = 10


def _as_json(query: str, index: str, found: list[Found]) -> dict[str, Any]:
    return {
        "query": query,
        "index": index,
        "conversations": [
            {
                "bot": item.where.bot,
                "id": item.match.conversation.id,
                "channel": item.match.conversation.channel,
                "chat": item.match.conversation.chat,
                "thread": item.match.conversation.thread,
                "kind": item.match.conversation.kind,
                "title": item.match.conversation.title,
                "created_at": item.match.conversation.created_at,
                "updated_at": item.match.conversation.updated_at,
                "score": item.match.score,
                "matching_messages": item.match.hits,
                "messages": [
                    {
                        "id": hit.id,
                        "role": hit.role,
                        "created_at": hit.created_at,
                        "snippet": hit.snippet,
                    }
                    for hit in item.hits
                ],
            }
            for item in found
        ],
    }


def _as_text(found: list[Found], search: Search) -> str:
    blocks = []
    for item in found:
        about = f"{item.match.hits} matching message(s)"
        lines = [conversation_header(item.where, item.match.conversation, search, about)]
        lines += [message_line(hit, search, hit.snippet) for hit in item.hits[:5]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


async def search_main(home: Home, query: str, bot_name: str | None, as_json: bool) -> int:
    """Print the conversations matching `query` (every bot's, or one bot's); exit 1 if none."""
    if not query.strip():
        print("atlas search: give the words to search for", file=sys.stderr)
        return 2
    bots = [home.bot(bot_name)] if bot_name else list(home.bots.values())
    stores: list[BotStore] = []
    engines = await HomeEngines.open(home)  # the bots' files, or the home's PostgreSQL database
    try:
        for bot in bots:
            if not engines.on_postgres and not bot.db_path.exists():
                continue  # never talked: opening the store would create it
            store = engines.conversations(bot)
            await store.open()
            stores.append(BotStore(bot.name, store, qualify=len(bots) > 1))
        search = Search(
            query=query.strip(),
            limit=CLI_LIMIT,
            where=MessageFilter(),
            zone=ZoneInfo(home.settings.timezone),
        )
        found, index = await discover(stores, search) if stores else ([], "words")
    finally:
        for where in stores:
            await where.store.close()
        await engines.close()
    if as_json:
        print(json.dumps(_as_json(query, index, found), ensure_ascii=False, indent=2))
    elif found:
        print(_as_text(found, search))
    else:
        print(f"no conversation matches {query!r}", file=sys.stderr)
    return 0 if found else 1
