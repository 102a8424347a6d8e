"""Waiting: every approval and ask_user question a turn waits on, from every bot and channel,
and every subagent's ask_parent question to the agent that started it, answered here
(atlas/pending_asks.py). The first answer wins wherever it is given: an answer
here closes the channel's question, which shows it; one given on the channel first removes the
question here. The list is fetched again (`/waiting/live`) on each `waiting` event."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from atlas.channels.base import Answer
from atlas.dashboard.context import dashboard_of
from atlas.dashboard.page import Page
from atlas.dashboard.render import render, see_other
from atlas.errors import AtlasError

log = logging.getLogger(__name__)
CLOSED = "already answered, or no longer waiting"


def _values(request: web.Request, note: str = "") -> dict[str, object]:
    asks = dashboard_of(request).asks
    return {"open": asks.open(), "settled": list(asks.settled), "note": note, "in_chat": False}


async def waiting_page(request: web.Request) -> web.Response:
    return render(request, "waiting.html", **_values(request))


async def waiting_live(request: web.Request) -> web.Response:
    return render(request, "waiting_live.html", **_values(request))


def _answered(request: web.Request, note: str) -> web.Response:
    """htmx gets the list again (with the note); a plain form post goes back to the page."""
    if "HX-Request" in request.headers:
        return render(request, "waiting_live.html", **_values(request, note))
    return see_other("/waiting")


def _settle(
    request: web.Request, answer: Callable[[], bool], closed: str, done: str
) -> web.Response:
    """Give the answer (`answer()`: False when the question was closed meanwhile); a refused
    answer (AtlasError: not one of its choices, empty words) is a 400 saying why."""
    try:
        answered = answer()
    except AtlasError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    return _answered(request, done if answered else closed)


async def answer_approval(request: web.Request) -> web.Response:
    """POST choice (CSRF checked by the app's guard)."""
    asks = dashboard_of(request).asks
    ask_id = request.match_info["ask_id"]
    choice = str((await request.post()).get("choice", ""))
    pending = asks.get(ask_id)
    if pending is not None:
        log.info("dashboard: %s answers %r: %s", pending.address, pending.question[:60], choice)
    return _settle(
        request,
        lambda: asks.answer_approval(ask_id, choice),
        f"That question was {CLOSED}.",
        f"Answered: {choice}.",
    )


async def answer_questions(request: web.Request) -> web.Response:
    """POST q<n> (a choice; several for multi-select) and q<n>-other (words) per question."""
    asks = dashboard_of(request).asks
    ask_id = request.match_info["ask_id"]
    form = await request.post()
    pending = asks.get(ask_id)
    if pending is None:
        return _answered(request, f"Those questions were {CLOSED}.")
    answers = []
    for index, question in enumerate(pending.questions):
        picked = [str(v) for v in form.getall(f"q{index}", [])]
        chosen = tuple(c for c in question.choices if c in picked)
        other = str(form.get(f"q{index}-other", "")).strip()
        answers.append(Answer(chosen, other, by="the dashboard"))
    return _settle(
        request,
        lambda: asks.answer_questions(ask_id, answers),
        f"Those questions were {CLOSED}.",
        "Answered.",
    )


async def answer_subagent(request: web.Request) -> web.Response:
    """POST answer (words): the person answers a subagent's question before its parent does."""
    asks = dashboard_of(request).asks
    ask_id = request.match_info["ask_id"]
    text = str((await request.post()).get("answer", ""))
    pending = asks.get(ask_id)
    if pending is None:
        return _answered(request, f"That question was {CLOSED}.")
    log.info("dashboard: answers %s's question %r", pending.asker, pending.question[:60])
    return _settle(
        request,
        lambda: asks.answer_text(ask_id, text),
        f"That question was {CLOSED}.",
        f"Answered {pending.asker}.",
    )


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/waiting", waiting_page)
    router.add_get("/waiting/live", waiting_live)
    router.add_post("/waiting/{ask_id}/approval", answer_approval)
    router.add_post("/waiting/{ask_id}/questions", answer_questions)
    router.add_post("/waiting/{ask_id}/subagent", answer_subagent)


PAGE = Page("Waiting", "/waiting", setup)
