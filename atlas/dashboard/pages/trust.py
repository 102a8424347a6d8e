"""Trust: each bot's gate mode (changeable here by the person), the modes conversations chose
with /mode, and the gate's decision log from atlas.db with filters, paged."""

from __future__ import annotations

import logging

from aiohttp import web

from atlas.dashboard.context import dashboard_of
from atlas.dashboard.modes import MODES, set_bot_mode, set_conversation_mode
from atlas.dashboard.page import Page
from atlas.dashboard.queries import DECISIONS_PER_PAGE, DecisionFilter
from atlas.dashboard.render import render, see_other
from atlas.errors import AtlasError
from atlas.workers.dashboard_ops import Workers

log = logging.getLogger(__name__)
VERDICTS = ("allow", "deny")
ANSWERED_BY = ("rule", "guardian", "user", "timeout", "nobody")


async def trust_page(request: web.Request) -> web.Response:
    dashboard = dashboard_of(request)
    query = request.query
    where = DecisionFilter(
        bot=query.get("bot", ""),
        verdict=query.get("verdict", ""),
        answered_by=query.get("answered_by", ""),
        tool=query.get("tool", "").strip(),
        text=query.get("q", "").strip(),
    )
    before = query.get("before", "")
    before_id = int(before) if before.isdigit() else None
    rows = await dashboard.home_reads.gate_decisions(
        where, before_id=before_id, limit=DECISIONS_PER_PAGE
    )
    overrides = [
        (bot, conversation, state.mode)
        for (bot, conversation), state in dashboard.conversation_states().items()
        if state.mode
    ]
    workers = Workers.of(dashboard.dispatcher)  # the conversations worker processes hold
    if workers is not None:
        overrides.extend(await workers.conversation_modes())
    overrides.sort()
    return render(
        request,
        "trust.html",
        bots=list(dashboard.home.bots.values()),
        modes=MODES,
        overrides=overrides,
        rows=rows,
        where=where,
        verdicts=VERDICTS,
        answered=ANSWERED_BY,
        next_before=rows[-1]["id"] if len(rows) == DECISIONS_PER_PAGE else None,
        changed=query.get("changed", ""),
        error="",
    )


async def change_mode(request: web.Request) -> web.Response:
    """POST bot, mode (CSRF checked by the app's guard)."""
    dashboard = dashboard_of(request)
    form = await request.post()
    bot, mode = str(form.get("bot", "")), str(form.get("mode", ""))
    try:
        workers = Workers.of(dashboard.dispatcher)
        previous = await set_bot_mode(dashboard.home, dashboard.audit, bot, mode, workers)
    except AtlasError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    log.info("dashboard: bot %s mode %s -> %s", bot, previous, mode)
    return see_other(f"/trust?changed={bot}")


async def change_conversation_mode(request: web.Request) -> web.Response:
    """POST bot, conversation, mode ("" for the bot's own)."""
    dashboard = dashboard_of(request)
    form = await request.post()
    bot, number, mode = (str(form.get(k, "")) for k in ("bot", "conversation", "mode"))
    if not number.isdigit():
        raise web.HTTPBadRequest(text=f"conversation {number!r} is not an id")
    states = dashboard.conversation_states()
    try:
        workers = Workers.of(dashboard.dispatcher)
        await set_conversation_mode(states, dashboard.audit, bot, int(number), mode, workers)
    except AtlasError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    return see_other(f"/trust?changed={bot}+%23{number}")


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/trust", trust_page)
    router.add_post("/trust/mode", change_mode)
    router.add_post("/trust/conversation-mode", change_conversation_mode)


PAGE = Page("Trust", "/trust", setup)
