"""`EventHub`: fans an event's name out to every open `/events` stream (atlas/dashboard/events.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

QUEUE_SIZE = 100  # a stream this far behind misses events, never blocks a publisher
CLOSED = "\x00closed"


class EventHub:
    def __init__(self, heartbeat: float = 15.0) -> None:
        self.heartbeat = heartbeat
        self._queues: set[asyncio.Queue[str]] = set()
        self.closed = False

    def publish(self, name: str) -> None:
        for queue in self._queues:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(name)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_SIZE)
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
