"""The 👀 reaction that says a reply is being written, as background work of its own.

It used to be awaited: added before the turn, removed before the reply, each call retried
after Slack's Retry-After. Three 429s with Retry-After 6 held the model call and the reply back
by 18 s. Now marking and unmarking only start a task and return. Each call is made once (a
decoration is not worth a retry, nor a wait); a removal waits for its own addition first, so
the mark never stays on because the two crossed. At most `limit` calls are in flight (a Slack
that answers everything with 429 must not pile tasks up); beyond that a new mark is skipped.
A failure is logged as one line, at WARNING for the first of a run of failures and at DEBUG
for the rest until a call succeeds again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from atlas.channels.base import Address
from atlas.channels.send_errors import SendError

log = logging.getLogger(__name__)

TYPING_REACTION = "eyes"
IN_FLIGHT_LIMIT = 16  # reaction calls at once, per channel

ReactionCall = Callable[..., Awaitable[Any]]  # (method, **params), one attempt


class TypingMarks:
    """Adds and removes the typing reaction without anyone waiting on Slack."""

    def __init__(self, channel: str, call: ReactionCall, limit: int = IN_FLIGHT_LIMIT) -> None:
        self.channel = channel  # the channel's name, for the log
        self._call = call
        self.limit = limit
        self._tasks: set[asyncio.Task[None]] = set()
        self._added: dict[Address, asyncio.Task[bool]] = {}
        self._failing = False  # a failure was logged at WARNING; quiet until a success

    def mark(self, address: Address, channel: str, ts: str) -> None:
        """Start adding the reaction to message `ts`; skipped when too many calls wait."""
        if len(self._tasks) >= self.limit:
            log.debug(
                "%s: %d reaction calls in flight; no mark for %s", self.channel, self.limit, address
            )
            return
        added = self._spawn(self._react("reactions.add", channel, ts))
        self._added[address] = added

    def unmark(self, address: Address, channel: str, ts: str) -> None:
        """Start removing the reaction once its addition is over (if it was made)."""
        added = self._added.pop(address, None)
        if added is not None:
            self._spawn(self._remove_after(added, channel, ts))

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._added.clear()

    def _spawn(self, work: Any) -> Any:
        task = asyncio.create_task(work, name=f"{self.channel} reaction")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _remove_after(self, added: asyncio.Task[bool], channel: str, ts: str) -> bool:
        if await asyncio.shield(added):
            return await self._react("reactions.remove", channel, ts)
        return False

    async def _react(self, method: str, channel: str, ts: str) -> bool:
        """One call; whether it went. What fails is logged, never raised."""
        try:
            await self._call(method, channel=channel, timestamp=ts, name=TYPING_REACTION)
        except SendError as exc:
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            log.log(level, "%s: %s (the typing mark is left out)", self.channel, exc)
            return False
        self._failing = False
        return True


__all__ = ["IN_FLIGHT_LIMIT", "TYPING_REACTION", "TypingMarks"]
