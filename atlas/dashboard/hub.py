"""`EventHub`: fans an event out to every open `/events` stream (atlas/dashboard/events.py).

An event is a name (`home`, `waiting`, `routines`: a page refetches its live part) or a
`Pushed` one that carries its data (the Chat page's messages, rendered once for every tab)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

QUEUE_SIZE = 500  # a stream this far behind misses events, never blocks a publisher
CLOSED = "\x00closed"


@dataclass(frozen=True)
class Pushed:
    """An event with its data: `data` is one line (JSON), sent as is."""

    name: str
    data: str


Event = str | Pushed


class EventHub:
    def __init__(self, heartbeat: float = 15.0) -> None:
        self.heartbeat = heartbeat
        self._queues: set[asyncio.Queue[Event]] = set()
        self.closed = False

    def publish(self, event: Event) -> None:
        for queue in self._queues:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[Event]]:
        queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    def close(self) -> None:
        self.closed = True
        self.publish(CLOSED)

    @property
    def streams(self) -> int:
        return len(self._queues)
