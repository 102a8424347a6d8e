"""Chat: talk to any bot in the browser, the reply streaming as it is written.

The chat is a channel like the console one (atlas/dashboard/chat_channel.py): a message goes
to the dispatcher, which stores it (searchable on Conversations) and runs the turn; `/stop`
stops it, `/mode` and `/status` work as anywhere. The browser's one event stream
(atlas/dashboard/events.py) brings each tab the `chat` events: the person's messages, the reply
so far, then the finished message with its tool calls folded under it.
The questions the turn waits on show under it, answered as on Waiting.

The log shows each stored turn's tool calls folded between the person's message and the
reply (atlas/dashboard/chat_history.py), on every visit. A reply finished live keeps the
calls it showed, folded; they then load their stored results in place (`/chat/{bot}/calls`).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlencode

from aiohttp import web
from markupsafe import Markup

from atlas.channels.base import Address
from atlas.dashboard.chat_channel import WEB_CHANNEL, WEB_CHAT, ChatEvent, web_address
from atlas.dashboard.chat_history import ChatItem, live_call
from atlas.dashboard.context import Dashboard, dashboard_of
from atlas.dashboard.conversation_reads import conversation_reads
from atlas.dashboard.hub import Pushed
from atlas.dashboard.page import Page
from atlas.dashboard.render import environment, masked, render, see_other
from atlas.dispatch import Inbound
from atlas.errors import AtlasError
from atlas.home import Bot

LONGEST = 20_000  # characters a message may have
_LAST_WORD = re.compile(r"\S+\Z")


def _bot(dashboard: Dashboard, name: str) -> Bot:
    bot = dashboard.home.bots.get(name)
    if bot is None:
        raise web.HTTPNotFound(text=f"no bot named {name!r} in this home")
    return bot


async def _history(dashboard: Dashboard, bot: Bot) -> tuple[int | None, list[ChatItem]]:
    """The chat's conversation id and its latest turns as the log shows them, oldest first
    (none yet: None)."""
    store = await dashboard.store(bot)
    if store is None:
        return None, []
    return await conversation_reads(store).chat_history(WEB_CHANNEL, WEB_CHAT)


def _asks(dashboard: Dashboard, bot: Bot) -> list[object]:
    here = web_address(bot.name)
    return [ask for ask in dashboard.asks.open() if ask.address == here]


async def chat_index(request: web.Request) -> web.Response:
    return see_other(f"/chat/{dashboard_of(request).home.main_bot.name}")


async def chat_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    conversation, items = await _history(dashboard, bot)
    draft = ""
    if dashboard.chat is not None:  # a tab opened mid-reply shows it so far
        feed = dashboard.chat.feed(web_address(bot.name))
        reply = ChatEvent("reply", feed.partial, tuple(feed.tools))
        draft = _fragment(dashboard, bot.name, reply)[1]
        if (feed.partial or feed.tools) and items and not items[-1].done:
            items.pop()  # the running turn's calls: in the draft, not twice
    return render(
        request,
        "chat.html",
        bot=bot,
        bots=list(dashboard.home.bots.values()),
        conversation=conversation,
        items=items,
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


async def chat_calls(request: web.Request) -> web.Response:
    """The stored calls (with their results) of the turn whose calls' ids are the `call`s
    asked for, as the log shows them: what a reply finished live loads in place of the calls
    it showed. None such (not stored, or no longer among the latest turns): 204, the page
    keeps what it has."""
    dashboard = dashboard_of(request)
    bot = _bot(dashboard, request.match_info["bot"])
    wanted = request.query.getall("call", [])
    conversation, items = await _history(dashboard, bot)
    for item in reversed(items):
        if wanted and [call.id for call in item.calls] == wanted:
            html = (
                environment()
                .get_template("chat_calls.html")
                .render(calls=item.calls, bot_name=bot.name, conversation=conversation)
            )
            return web.Response(text=masked(html, dashboard), content_type="text/html")
    return web.Response(status=204)


def _fragment(dashboard: Dashboard, bot: str, event: ChatEvent) -> tuple[str, str]:
    """(part, HTML) for the tabs: a message for the log, or the reply so far."""
    env = environment()
    calls = [live_call(call) for call in event.tools]
    if event.kind == "reply":
        # The last word is held back until the next one starts: a secret (no spaces) is
        # shown only whole, where the mask can see it.
        text = _LAST_WORD.sub("", event.text)
        html = env.get_template("chat_reply.html").render(text=text, calls=calls)
        return "reply", masked(html, dashboard)
    role = "user" if event.kind == "user" else "assistant"
    # The finished reply keeps its calls folded; their results are stored by now: loaded.
    ids = urlencode([("call", call.id) for call in calls])
    html = env.get_template("chat_message.html").render(
        role=role,
        text=event.text,
        calls=calls,
        no_result="result loading",
        refetch=f"/chat/{bot}/calls?{ids}" if calls else None,
    )
    return "message", masked(html, dashboard)


def _pushed(bot: str, part: str, html: str) -> Pushed:
    return Pushed("chat", json.dumps({"bot": bot, "part": part, "html": html}))


def chat_events(dashboard: Dashboard, address: Address, event: ChatEvent) -> list[Pushed]:
    """What the browsers' event stream carries for one chat event (rendered once for all the
    tabs): a message, then the reply so far cleared; or the reply so far."""
    pushed = [_pushed(address.bot, *_fragment(dashboard, address.bot, event))]
    if event.kind == "message":
        cleared = _fragment(dashboard, address.bot, ChatEvent("reply", ""))
        pushed.append(_pushed(address.bot, *cleared))
    return pushed


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/chat", chat_index)
    router.add_get("/chat/{bot}", chat_page)
    router.add_post("/chat/{bot}", chat_send)
    router.add_get("/chat/{bot}/asks", chat_asks)
    router.add_get("/chat/{bot}/calls", chat_calls)


PAGE = Page("Chat", "/chat", setup)
