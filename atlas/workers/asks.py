"""The questions a worker process's turns wait on, listed in the home's process too.

The dashboard (in the home's process) lists and answers the home's one PendingAsks
(atlas/pending_asks.py). A worker's dispatcher and subagents put their questions through a
`ForwardedAsks` instead: a PendingAsks like any other (the channel's wait, the race, the first
answer wins), which also tells the home's process of each question it lists and of how each
ended. The ops, over the worker's link:

  asks_put      worker -> home   a question to list (its fields; the home makes the entry)
  asks_settle   worker -> home   how it ended (the chat's answer, the page's, no answer in time)
  asks_answer   home -> worker   the page's answer; the worker's race takes it if it is first

The page's answer settles the home's entry at once (as in one process); in the worker it
cancels the channel's wait with AnsweredElsewhere, so Telegram or Slack edit the question
message to show it. When the chat's answer came first after all, the worker's settle corrects
the home's entry. A worker that stops closes its questions on the page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from atlas.errors import AtlasError
from atlas.pending_asks import PendingAsk, PendingAsks
from atlas.workers.link import Link

if TYPE_CHECKING:
    from atlas.workers.routing import Elsewhere

log = logging.getLogger(__name__)

PUT = "asks_put"
SETTLE = "asks_settle"
ANSWER = "asks_answer"
WORKER_STOPPED = "closed: its worker process stopped"
# A PendingAsk's fields that cross the link (not its future, nor how it ended).
_SENT = tuple(f.name for f in fields(PendingAsk) if f.name not in ("answer", "outcome"))
_watchers: set[asyncio.Task[None]] = set()  # serve_asks's, kept until their links close


class ForwardedAsks(PendingAsks):
    """A worker's PendingAsks (`dispatcher.asks`): mirrored in the home's over `link`."""

    def __init__(self, link: Link, share: int) -> None:
        super().__init__()
        self._link = link
        self._share = share
        link.on(ANSWER, self._answered_on_page)

    def _list(self, pending: PendingAsk) -> None:
        pending.share = self._share
        super()._list(pending)
        sent = {name: getattr(pending, name) for name in _SENT}
        # tell_soon keeps the order: the home's process hears of a question before its end.
        self._link.tell_soon(PUT, sent)

    def _settle(self, pending: PendingAsk, outcome: str) -> None:
        if self.get(pending.id) is None:
            return  # closed already, and said so
        super()._settle(pending, outcome)
        self._link.tell_soon(SETTLE, pending.id, outcome)

    async def _answered_on_page(self, ask_id: str, answer: object) -> None:
        pending = self.get(ask_id)
        if pending is None or pending.answer.done():
            return  # the chat's answer came first: its settle is on the way to the home
        try:
            if pending.kind == "approval":
                self.answer_approval(ask_id, str(answer))
            elif pending.kind == "questions":
                self.answer_questions(ask_id, list(getattr(answer, "answers", ())))
            else:
                self.answer_text(ask_id, str(answer))
        except AtlasError as exc:  # checked by the home's entry already: not expected
            log.warning("the page's answer to %s was refused here: %s", ask_id, exc)


def serve_asks(link: Link, home_asks: Callable[[], Awaitable[PendingAsks]]) -> None:
    """In the home's process: list a worker's questions in `home_asks()` (the dispatcher's,
    which the dashboard shows), forward the page's answers, and close them if the worker
    stops."""
    listed: dict[str, PendingAsks] = {}

    async def put(sent: dict[str, Any]) -> None:
        asks = await home_asks()
        pending = PendingAsk(**sent)

        def forward(answer: object) -> None:
            link.tell_soon(ANSWER, pending.id, answer)

        listed[pending.id] = asks
        asks.list_elsewhere(pending, forward)

    async def settle(ask_id: str, outcome: str) -> None:
        asks = listed.pop(ask_id, None) or await home_asks()
        asks.close_elsewhere(ask_id, outcome)

    async def close_on_stop() -> None:
        await link.closed.wait()
        for ask_id, asks in list(listed.items()):
            asks.close_elsewhere(ask_id, WORKER_STOPPED)
        listed.clear()

    link.on(PUT, put)
    link.on(SETTLE, settle)
    watcher = asyncio.ensure_future(close_on_stop())
    _watchers.add(watcher)
    watcher.add_done_callback(_watchers.discard)


def dispatchers_asks(elsewhere: Elsewhere) -> Callable[[], Awaitable[PendingAsks]]:
    """The home's dispatcher's PendingAsks, once it exists: the workers start (and may ask)
    before the home's dispatcher is made, so their first questions wait for it."""

    async def asks() -> PendingAsks:
        return (await elsewhere.dispatcher()).asks

    return asks


__all__ = ["ForwardedAsks", "dispatchers_asks", "serve_asks"]
