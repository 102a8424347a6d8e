"""Chat: talk to any bot in the browser, the reply streaming as it is written.

The chat is a channel like the console one (atlas/dashboard/chat_channel.py): a message goes
to the dispatcher, which stores it (searchable on Conversations) and runs the turn; `/stop`
stops it, `/mode` and `/status` work as anywhere. The browser's one event stream
(atlas/dashboard/events.py) brings each tab the `chat` events: the person's messages, the reply
so far, then the finished message with its tool calls folded under it.
The questions the turn waits on show under it, answered as on Waiting.
"""

from __future__ import annotations

import json
import re

from aiohttp import web
from markupsafe import Markup

from atlas.channels.base import Address
from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT, ChatEvent, web_address
from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.hub import Pushed
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
    draft = ""
    if dashboard.chat is not None:  # a tab opened mid-reply shows it so far
        feed = dashboard.chat.feed(web_address(bot.name))
        draft = _fragment(dashboard, ChatEvent("reply", feed.partial, tuple(feed.tools)))[1]
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
        draft=Markup(draft),  # rendered and masked by _fragment
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
    """(part, HTML) for the tabs: a message for the log, or the reply so far."""
    env = environment()
    if event.kind == "reply":
        # The last word is held back until the next one starts: a secret (no spaces) is
        # shown only whole, where the mask can see it.
        text = _LAST_WORD.sub("", event.text)
        html = env.get_template("chat_reply.html").render(text=text, tools=event.tools)
        return "reply", masked(html, dashboard)
    role = "user" if event.kind == "user" else "assistant"
    html = env.get_template("chat_message.html").render(
        role=role, text=event.text, tools=event.tools
    )
    return "message", masked(html, dashboard)


def _pushed(bot: str, part: str, html: str) -> Pushed:
    return Pushed("chat", json.dumps({"bot": bot, "part": part, "html": html}))


def chat_events(dashboard: Dashboard, address: Address, event: ChatEvent) -> list[Pushed]:
    """What the browsers' event stream carries for one chat event (rendered once for all the
    tabs): a message, then the reply so far cleared; or the reply so far."""
    pushed = [_pushed(address.bot, *_fragment(dashboard, event))]
    if event.kind == "message":
        pushed.append(_pushed(address.bot, *_fragment(dashboard, ChatEvent("reply", ""))))
    return pushed


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/chat", chat_index)
    router.add_get("/chat/{bot}", chat_page)
    router.add_post("/chat/{bot}", chat_send)
    router.add_get("/chat/{bot}/asks", chat_asks)


PAGE = Page("Chat", "/chat", setup)
