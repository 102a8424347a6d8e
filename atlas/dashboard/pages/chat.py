"""Chat: talk to any bot in the browser, the reply streaming as it is written.

The chat is a channel like the console one (atlas/dashboard/chat_channel.py): a message goes
to the dispatcher, which stores it (searchable on Conversations) and runs the turn; `/stop`
stops it, `/mode` and `/status` work as anywhere. Each tab holds an event stream of its chat
(`/chat/<bot>/stream`): the person's messages, the reply so far, then the finished message.
The questions the turn waits on show under it, answered as on Waiting.
"""

from __future__ import annotations

import asyncio
import re

from aiohttp import web

from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT, ChatEvent, web_address
from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.page import Page
from atlas.dashboard.render import environment, masked, render, see_other
from atlas.dispatch import Inbound
from atlas.errors import AtlasError
from atlas.home import Bot
from atlas.store.search import MessageFilter, StoredMessage

HISTORY = 40  # the latest messages shown; the whole conversation is on Conversations
LONGEST = 20_000  # characters a message may have
_LAST_WORD = re.compile(r"\S+\Z")


def _bot(dashboard: Dashboard, name: str) -> Bot:
    bot = dashboard.home.bots.get(name)
    if bot is None:
        raise web.HTTPNotFound(text=f"no bot named {name!r} in this home")
    return bot


async def _history(dashboard: Dashboard, bot: Bot) -> tuple[int | None, list[StoredMessage]]:
    """The chat's conversation id and its latest messages, oldest first (none yet: None)."""
    store = await dashboard.store(bot)
    if store is None:
        return None, []
    found = await store.db.call(
        lambda db: db.execute(
            "SELECT id FROM conversations WHERE channel = ? AND chat = ? AND thread = '' "
            "AND user = ''",
            [WEB_CHANNEL, WEB_CHAT],
        ).fetchone()
    )
    if found is None:
        return None, []
    where = MessageFilter(conversation_id=found[0])
    latest = await store.read_messages(where, limit=HISTORY, newest_first=True, chars=LONGEST)
    return found[0], list(reversed(latest))


def _asks(dashboard: Dashboard, bot: Bot) -> list[object]:
    here = web_address(bot.name)
    return [ask for ask in dashboard.asks.open() if ask.address == here]


async def chat_index(request: web.Request) -> web.Response:
    return see_other(f"/chat/{dashboard_of(request).home.main_bot.name}")


async def chat_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    conversation, messages = await _history(dashboard, bot)
    return render(
        request,
        "chat.html",
        bot=bot,
        bots=list(dashboard.home.bots.values()),
        conversation=conversation,
        messages=messages,
        asks=_asks(dashboard, bot),
        in_chat=True,
        available=dashboard.chat is not None,
    )


async def chat_asks(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    return render(request, "chat_asks.html", bot=bot, asks=_asks(dashboard, bot), in_chat=True)


async def chat_send(request: web.Request) -> web.Response:
    """POST text (CSRF checked by the app's guard): to the dispatcher, as a channel's message."""
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    if dashboard.chat is None or dashboard.dispatcher is None:
        raise web.HTTPServiceUnavailable(text="the chat needs the running daemon (atlas run)")
    text = str((await request.post()).get("text", "")).strip()
    if len(text) > LONGEST:
        raise web.HTTPBadRequest(text=f"a message may have up to {LONGEST:,} characters")
    if text:
        address = web_address(bot.name)
        dashboard.chat.said_by_person(address, text)
        try:
            await dashboard.dispatcher.submit(Inbound(address, text))
        except AtlasError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
    if "HX-Request" in request.headers:
        return render(request, "chat_form.html", bot=bot)
    return see_other(f"/chat/{bot.name}")


def _fragment(dashboard: Dashboard, event: ChatEvent) -> tuple[str, str]:
    """(event name, HTML) for a tab: a message for the log, or the reply so far."""
    env = environment()
    if event.kind == "reply":
        # The last word is held back until the next one starts: a secret (no spaces) is
        # shown only whole, where the mask can see it.
        text = _LAST_WORD.sub("", event.text)
        html = env.get_template("chat_reply.html").render(text=text, tools=event.tools)
        return "reply", masked(html, dashboard)
    role = "user" if event.kind == "user" else "assistant"
    html = env.get_template("chat_message.html").render(role=role, text=event.text)
    return "message", masked(html, dashboard)


def _sse(name: str, html: str) -> bytes:
    data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"event: {name}\n{data}\n".encode()


async def chat_stream(request: web.Request) -> web.StreamResponse:
    """`/chat/<bot>/stream`: this chat's events for one tab, until it closes or we stop."""
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    if dashboard.chat is None:
        raise web.HTTPServiceUnavailable(text="the chat needs the running daemon (atlas run)")
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    await response.write(b"retry: 5000\n\n")
    address = web_address(bot.name)
    with dashboard.chat.subscribe(address) as queue:
        feed = dashboard.chat.feed(address)
        if feed.partial or feed.tools:  # a tab opened mid-reply sees it so far
            queue.put_nowait(ChatEvent("reply", feed.partial, tuple(feed.tools)))
        while not dashboard.chat.closed:
            try:
                event = await asyncio.wait_for(queue.get(), dashboard.events.heartbeat)
            except TimeoutError:  # a comment line: a proxy keeps the quiet stream open
                chunk = b": still here\n\n"
            else:
                if event is None:
                    break
                chunk = _sse(*_fragment(dashboard, event))
                if event.kind == "message":  # the reply so far is done: clear it
                    chunk += _sse(*_fragment(dashboard, ChatEvent("reply", "")))
            try:
                await response.write(chunk)
            except ConnectionError:  # the tab closed
                break
    return response


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/chat", chat_index)
    router.add_get("/chat/{bot}", chat_page)
    router.add_post("/chat/{bot}", chat_send)
    router.add_get("/chat/{bot}/asks", chat_asks)
    router.add_get("/chat/{bot}/stream", chat_stream)


PAGE = Page("Chat", "/chat", setup)
