"""Messages between nodes: rows in `node_messages` plus LISTEN/NOTIFY to wake the bot's owner.

Anything for a bot another node owns (the dashboard's chat, `message_agent`, a routine's run,
an approval answered elsewhere) is a row addressed to the bot, not to a node: whoever holds
the bot's lease when it is read takes it. Taking is fenced (the lease still ours, in the same
transaction) and claims rows with `FOR UPDATE SKIP LOCKED`, so each row is taken once, by the
owner. A handler given to `take` runs inside that transaction: what it writes to the
database lands together with the claim or not at all (exactly once for database effects).

NOTIFY only wakes the owner early; a sweep every `sweep_seconds` finds rows whose notice was
missed (the listening connection was down, or the bot changed hands after the notice).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from atlas.cluster.leases import Fence, FenceError, fenced
from atlas.store.pg.server import PgServer, until_reached

log = logging.getLogger(__name__)

CHANNEL = "atlas_node_messages"
RELISTEN_PAUSE = 1.0  # seconds between tries to listen again after the connection ended


@dataclass(frozen=True)
class NodeMessage:
    id: int
    to_bot: str
    kind: str
    body: dict[str, Any]
    from_node: str
    created_at: datetime


Handler = Callable[[asyncpg.Connection, list[NodeMessage]], Awaitable[None] | None]


class NodeMessages:
    """Send to a bot wherever it runs; take what is addressed to a bot this node holds."""

    def __init__(self, server: PgServer, node: str):
        self.server = server
        self.node = node

    async def send(self, to_bot: str, kind: str, body: dict[str, Any]) -> int:
        """Store a message for `to_bot` and notify (delivered at commit); return its id."""
        async with self.server.pool.acquire() as conn, conn.transaction():
            message_id = await conn.fetchval(
                "INSERT INTO node_messages (to_bot, kind, body, from_node) "
                "VALUES ($1, $2, $3::jsonb, $4) RETURNING id",
                to_bot,
                kind,
                json.dumps(body),
                self.node,
            )
            await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, to_bot)
        return int(message_id)

    async def take(
        self, bot: str, fence: Fence, *, limit: int = 100, handle: Handler | None = None
    ) -> list[NodeMessage]:
        """Claim the waiting messages for `bot`, oldest first, if `fence` still holds;
        `handle(conn, messages)` runs in the same transaction (its failure un-claims them).
        FenceError when the lease is not ours any more: nothing is claimed."""
        async with fenced(self.server, fence) as conn:
            rows = await conn.fetch(
                "UPDATE node_messages SET taken_by = $2, taken_epoch = $3, taken_at = now() "
                "WHERE id IN (SELECT id FROM node_messages WHERE to_bot = $1 "
                "AND taken_by IS NULL ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) "
                "RETURNING id, to_bot, kind, body, from_node, created_at",
                bot,
                self.node,
                fence.epoch,
                limit,
            )
            messages = sorted(
                (
                    NodeMessage(
                        int(row["id"]),
                        row["to_bot"],
                        row["kind"],
                        json.loads(row["body"]),
                        row["from_node"],
                        row["created_at"],
                    )
                    for row in rows
                ),
                key=lambda message: message.id,
            )
            if messages and handle is not None:
                result = handle(conn, messages)
                if inspect.isawaitable(result):
                    await result
        return messages


class Inbox:
    """Listens for notices and takes the messages of the bots this node holds.

    `fence_for(bot)` is the node's (ClusterNode.fence): None for a bot held elsewhere, whose
    notices are ignored. `deliver(conn, messages)` runs inside the claiming transaction;
    `taken(messages)`, when given, after it committed (work that must start only once the
    claim is sure, such as a routine's run).
    """

    def __init__(
        self,
        messages: NodeMessages,
        fence_for: Callable[[str], Fence | None],
        held_bots: Callable[[], Iterable[str]],
        deliver: Handler,
        *,
        sweep_seconds: float = 5.0,
        taken: Callable[[list[NodeMessage]], None] | None = None,
    ):
        self.messages = messages
        self.fence_for = fence_for
        self.held_bots = held_bots
        self.deliver = deliver
        self.sweep_seconds = sweep_seconds
        self.taken = taken
        self._woken: set[str] = set()
        self._wake = asyncio.Event()
        self._listener: asyncpg.Connection | None = None
        self._heard: dict[str, Callable[..., None]] = {}  # channel -> callback, kept to relisten
        self._relistening: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._heard[CHANNEL] = self._on_notice
        await self._open_listener()
        self._task = asyncio.create_task(self._run(), name=f"inbox {self.messages.node}")
        self.wake(*self.held_bots())  # rows sent before we listened

    async def listen(self, channel: str, callback: Callable[..., None]) -> None:
        """Also hear `channel`'s notices on the inbox's listening connection (after start)."""
        if self._listener is None:
            raise RuntimeError(f"inbox {self.messages.node}: listen before start")
        self._heard[channel] = callback
        await self._listener.add_listener(channel, callback)

    async def _open_listener(self) -> None:
        listener = await self.messages.server.connect_alone()
        try:
            for channel, callback in self._heard.items():
                await listener.add_listener(channel, callback)
        except BaseException:
            await listener.close()
            raise
        self._listener = listener
        listener.add_termination_listener(self._listener_ended)

    def _listener_ended(self, conn: object) -> None:
        if conn is not self._listener:
            return  # closed by stop(), or an earlier connection
        self._listener = None
        log.warning("inbox %s: the listening connection ended; listening again", self.messages.node)
        self._relistening = asyncio.get_running_loop().create_task(self._listen_again())

    async def _listen_again(self) -> None:
        """Until the server answers again: meanwhile the sweep still finds every message, every
        `sweep_seconds`; notices sent in the gap are lost, so every held bot is looked at."""
        await until_reached(self._open_listener, RELISTEN_PAUSE, f"inbox {self.messages.node}")
        log.warning("inbox %s: listening again", self.messages.node)
        self.wake(*self.held_bots())

    async def stop(self) -> None:
        for task in (self._task, self._relistening):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._relistening = None
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

    def wake(self, *bots: str) -> None:
        """Look for `bots`' messages now (a notice, or a bot just gained)."""
        self._woken.update(bots)
        self._wake.set()

    def _on_notice(self, conn: object, pid: int, channel: str, bot: str) -> None:
        if self.fence_for(bot) is not None:
            self.wake(bot)

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.sweep_seconds):
                    await self._wake.wait()
            except TimeoutError:
                self._woken.update(self.held_bots())  # the sweep
            self._wake.clear()
            bots, self._woken = self._woken, set()
            for bot in sorted(bots):
                fence = self.fence_for(bot)
                if fence is None:
                    continue
                try:
                    messages = await self.messages.take(bot, fence, handle=self.deliver)
                except FenceError as exc:
                    log.info("inbox %s: %s", self.messages.node, exc)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.warning(
                        "inbox %s: taking %s's messages failed: %s", self.messages.node, bot, exc
                    )
                    self._woken.add(bot)  # retried at the next wake or sweep
                else:
                    if messages and self.taken is not None:
                        try:
                            self.taken(messages)
                        except Exception:  # one bad message must not stop the inbox
                            log.exception("inbox %s: after taking %s's", self.messages.node, bot)
