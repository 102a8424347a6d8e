"""A question's post that a cancel must not cut short.

When the wait on a question is cancelled (a timeout, /stop, the dashboard answering first)
while its message is still being posted, the platform may already show the question: a post
cut short there leaves live buttons nobody will ever count, and no message id to close them
by. So the post runs to its end (the whole of it: the outbox row written, the message posted,
the row marked), what it posted is recorded, and the cancel is raised after, where the
question's own cancel path closes it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Generic, TypeVar

T = TypeVar("T")


class InFlight(Generic[T]):
    """`await in_flight.finish(post)` posts through a cancel; `raise_cancel()` then raises the
    cancel that came meanwhile (its AnsweredElsewhere reason kept), once the caller has
    recorded the message."""

    def __init__(self) -> None:
        self.cancel: asyncio.CancelledError | None = None

    async def finish(self, post: Awaitable[T]) -> T:
        """The post's result (or its error), however often the caller is cancelled meanwhile."""
        task = asyncio.ensure_future(post)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError as cancel:
                if task.cancelled():  # the post itself was cancelled (a shutdown): nothing to wait
                    raise
                if self.cancel is None:
                    self.cancel = cancel  # the first one says why (a timeout or an answer)

    def raise_cancel(self) -> None:
        """Raise the cancel that came while the post was in flight, if one did."""
        if self.cancel is not None:
            cancel, self.cancel = self.cancel, None
            raise cancel


__all__ = ["InFlight"]
