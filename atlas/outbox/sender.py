"""The one place messages go out: a queue per address, one worker task per address while it
has work, rows marked as they go.

A row is marked `sending` before the channel is called and `delivered` (with the platform's
message id) after, so a crash in between leaves `sending`, which the next start reads as "may
have arrived" (atlas/outbox/resume.py). What the channel raises decides the rest
(atlas/outbox/errors.py):

- RetryLater: the row and every row queued behind it are `kept`, in their order; the worker
  waits (the platform's `after`, else a backoff from `retry_first` doubling to `retry_cap`)
  and tries the first again; a new row for the address wakes it at once, and the kept rows
  go out ahead of it, each saying it is late. A restart sends them too (they stay `kept`).
- NeverRetry: `failed`, and the next row goes.
- MaybeDelivered: `maybe`, never sent again; the person is told once (a note queued in the
  same transaction, sent next).

Where several processes send (the PostgreSQL rows, atlas/store/pg/outbox.py), the `sending`
mark is a claim: a row another sender claimed is dropped from the queue unsent, and a sender
whose lease epoch another has passed (`StaleEpoch`) gives up the address's queue, sending
nothing more; its waiters get the error. On SQLite the claim is the plain mark of before.

A mark the store cannot write (a full disk; atlas/channels/store_faults.py) holds the queue and
is written again, after a short backoff, until it can: a row is never sent twice because its
`delivered` could not be written, and the worker never dies of it (issue 34: the disk-full run
of scripts/crash_test.py found a queue stalled until the next message).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from atlas.channels.base import Address
from atlas.channels.store_faults import store_cannot_write
from atlas.errors import AtlasError
from atlas.outbox.engine import DatabaseOf, OutboxRows, SqliteOutboxRows, StaleEpoch
from atlas.outbox.errors import MaybeDelivered, NeverRetry, RetryLater
from atlas.outbox.notes import RESEND_KEY, as_sent, is_resend, unsure_note
from atlas.outbox.rows import Kind, OutboxRow, State

if TYPE_CHECKING:
    from atlas.store.db import Database

log = logging.getLogger(__name__)
T = TypeVar("T")

# A kept message is tried again alone after this many seconds, then twice as long each time,
# up to the cap (a new message to the address tries it at once).
RETRY_FIRST = 60.0
RETRY_CAP = 900.0
# A mark the store could not write is written again after this, twice as long each time, up
# to the cap: a full disk is usually freed within seconds to minutes.
STORE_RETRY_FIRST = 0.5
STORE_RETRY_CAP = 15.0

EpochOf = Callable[[str], int]  # a bot's name → this sender's lease epoch for it


@dataclass(frozen=True)
class Delivery:
    """How a row's first turn in the queue ended (a kept row may still go out later)."""

    state: State
    error: str = ""
    platform_id: str | None = None


@dataclass
class Posted:
    """A row a channel posts itself (`Outbox.posting`): it sets the platform's message id."""

    row_id: int
    platform_id: str | None = None


@dataclass
class _Queue:
    """One address's rows not yet settled, oldest first, and who waits for which."""

    rows: list[OutboxRow] = field(default_factory=list)
    waiters: dict[int, asyncio.Future[Delivery]] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None
    waiting = False  # the worker waits out a backoff (its rows are kept)

    def settled(self) -> bool:
        """Nothing to try before the backoff ends: no rows, or kept ones only, waiting."""
        return not self.rows or (
            self.waiting
            and not self.wake.is_set()
            and all(row.state == "kept" for row in self.rows)
        )

    def add(self, row: OutboxRow, *, first: bool = False) -> None:
        if any(queued.id == row.id for queued in self.rows):
            self.wake.set()  # queued already (a resume meeting a live row): try it now
            return
        if first:
            self.rows.insert(0, row)
        else:
            bisect.insort(self.rows, row, key=lambda r: r.id)
        self.wake.set()


class Outbox:
    """Sends every row through its address's channel; see the module's docstring."""

    def __init__(
        self,
        channels: Mapping[str, Any],
        database: DatabaseOf,
        *,
        retry_first: float = RETRY_FIRST,
        retry_cap: float = RETRY_CAP,
        rows: OutboxRows | None = None,
        epoch: int | EpochOf | None = None,
    ) -> None:
        """`rows`: the engine keeping the rows (atlas/outbox/engine.py), by default each bot's
        conversations.db as `database` opens it. `epoch`: this sender's lease epoch, one for
        every bot or per bot (a function of its name); a sender whose epoch another has passed
        sends nothing more for that bot (`StaleEpoch`). None: 0, no leases."""
        self.channels = channels  # looked up per send: channels register as they start
        self._sqlite = SqliteOutboxRows(database)
        self.rows: OutboxRows = rows if rows is not None else self._sqlite
        self._epoch: EpochOf = epoch if callable(epoch) else (lambda _bot, e=epoch or 0: e)
        self.retry_first = retry_first
        self.retry_cap = retry_cap
        self._queues: dict[Address, _Queue] = {}

    def claim_with(self, epoch: EpochOf) -> None:
        """From now on claim each bot's rows with `epoch(bot)` (a node's lease epochs; it
        raises StaleEpoch for a bot the node does not hold)."""
        self._epoch = epoch

    def epoch_of(self, bot: str) -> int:
        """This sender's lease epoch for the bot's rows."""
        return self._epoch(bot)

    async def database(self, bot: str) -> Database:
        """The bot's conversations.db, kept once open (the SQLite rows' marks use it)."""
        return await self._sqlite.database(bot)

    # ------------------------------------------------------------ putting rows in

    async def send(
        self,
        address: Address,
        text: str,
        files: tuple[Path, ...] | list[Path] = (),
        *,
        kind: Kind,
        key: str | None = None,
    ) -> Delivery:
        """A new row, sent in its turn; how that went. With `key`, a row already made for the
        same key is awaited instead (never a second row)."""
        row_id = await self.enqueue(address, text, files, kind=kind, key=key)
        return await self.wait(address, row_id)

    async def enqueue(
        self,
        address: Address,
        text: str,
        files: tuple[Path, ...] | list[Path] = (),
        *,
        kind: Kind,
        key: str | None = None,
    ) -> int:
        """A new row (or the one `key` names), queued; its id. A sender that does not hold the
        bot any more (its epoch function raises `StaleEpoch`) writes no row: a row left by it
        would be sent late by the bot's next owner."""
        self._epoch(address.bot)
        row = await self.rows.add(address, kind, text, tuple(files), key=key)
        if row.state in ("pending", "kept"):
            self.queue([row])
        return row.id

    def queue(self, rows: list[OutboxRow], *, first: bool = False) -> None:
        """Rows written already (by `enqueue`, with an answer by `Outgoing`, by a resume),
        put in their addresses' queues; a worker starts where none runs."""
        for row in rows:
            queue = self._queues.get(row.address)
            if queue is None:
                queue = self._queues[row.address] = _Queue()
            queue.add(row, first=first)
            if queue.worker is None:
                queue.worker = asyncio.create_task(self._work(row.address, queue))

    async def wait(self, address: Address, row_id: int) -> Delivery:
        """How the row's turn ended. A row that is not queued is settled: read from its store."""
        queue = self._queues.get(address)
        queued = next((row for row in queue.rows if row.id == row_id), None) if queue else None
        if queued is not None and queued.state == "kept":
            return Delivery("kept", queued.error)  # its turn came: an outage kept it
        if queue is None or queued is None:
            row = await self.rows.get(address.bot, row_id)
            if row is None:
                raise AtlasError(f"outbox of bot {address.bot}: no row {row_id}")
            return Delivery(row.state, row.error, row.platform_id)
        future = queue.waiters.get(row_id)
        if future is None:
            future = queue.waiters[row_id] = asyncio.get_running_loop().create_future()
        # Shielded: a caller cancelled while waiting (a /stop) does not stop the sending.
        return await asyncio.shield(future)

    async def deliver(self, rows: list[OutboxRow]) -> list[Delivery]:
        """Queue rows written already and wait for each one's turn."""
        self.queue(rows)
        return [await self.wait(row.address, row.id) for row in rows]

    # ------------------------------------------------------------ the worker

    async def _work(self, address: Address, queue: _Queue) -> None:
        delay = self.retry_first
        try:
            while queue.rows:
                queue.wake.clear()
                row = queue.rows[0]
                try:
                    pause = await self._send_first(address, queue, row)
                except StaleEpoch as exc:  # another sender took the bot over: send nothing
                    log.warning("outbox: %s; %d row(s) to %s left", exc, len(queue.rows), address)
                    self._give_up(queue, exc)
                    return
                except Exception:  # a bug, not an outage: logged, the row failed, go on
                    log.exception("outbox: sending row %d to %s failed", row.id, address)
                    await self._settle(address, queue, row, "failed", "an error in Atlas")
                    continue
                if pause is None:
                    delay = self.retry_first
                    continue
                wait, honour = (pause, True) if pause > 0 else (delay, False)
                delay = min(delay * 2, self.retry_cap)
                await self._sleep(queue, wait, wake_early=not honour)
        finally:
            queue.worker = None
            if not queue.rows and self._queues.get(address) is queue:
                del self._queues[address]
            for future in queue.waiters.values():
                future.cancel()  # only at shutdown: every row's turn resolves its waiter

    async def _send_first(self, address: Address, queue: _Queue, row: OutboxRow) -> float | None:
        """Send the queue's first row and mark it. None: go on with the next; else the queue
        is kept and waits that long (0: the backoff's own delay)."""
        bot = address.bot
        channel = self.channels.get(address.channel)
        if channel is None:
            return await self._keep(queue, f"no channel named {address.channel!r} is running")
        epoch = self._epoch(bot)
        if not await self._written(lambda: self.rows.claim(bot, row.id, epoch=epoch), row):
            # Another sender has it (or it is settled): not ours to send.
            stored = await self.rows.get(bot, row.id)
            state = stored.state if stored is not None else "failed"
            self._resolve(queue, row, Delivery(state, "claimed by another sender"), drop=True)
            return None
        try:
            platform_id = await channel.send(address, as_sent(row), list(row.files))
        except RetryLater as exc:
            return await self._keep(queue, str(exc), exc)
        except NeverRetry as exc:
            log.warning("outbox: %s refused row %d: %s", address, row.id, exc)
            await self._settle(address, queue, row, "failed", str(exc))
            return None
        except MaybeDelivered as exc:
            await self._maybe(address, queue, row, exc)
            return None
        except (AtlasError, OSError) as exc:  # a channel that does not classify: not sent
            return await self._keep(queue, str(exc) or type(exc).__name__)
        pid = None if platform_id is None else str(platform_id)
        # Sent: written however long the store takes, never sent again for want of it.
        await self._written(lambda: self.rows.delivered(bot, row.id, pid, epoch=epoch), row)
        self._resolve(queue, row, Delivery("delivered", platform_id=pid))
        return None

    async def _written(self, write: Callable[[], Awaitable[T]], row: OutboxRow) -> T:
        """`write` on the store, again and again while the store cannot write (a full disk),
        the queue waiting meanwhile; any other failure is raised."""
        delay = STORE_RETRY_FIRST
        while True:
            try:
                return await write()
            except Exception as exc:
                why = store_cannot_write(exc)
                if why is None:
                    raise
                log.warning(
                    "outbox: row %d to %s waits: the store cannot write (%s); again in %.1f s",
                    row.id,
                    row.address,
                    why,
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, STORE_RETRY_CAP)

    async def _keep(self, queue: _Queue, error: str, exc: RetryLater | None = None) -> float:
        """An outage: every queued row is kept, in its order; the first cut down to what did
        not go (`exc.unsent`). The wait before the next try (0: the backoff's)."""
        ids = [row.id for row in queue.rows]
        unsent = exc.unsent if exc is not None else None
        unsent_files = exc.unsent_files if exc is not None else ()
        after = exc.after if exc is not None else None
        first = queue.rows[0]
        bot = first.address.bot
        epoch = self._epoch(bot)
        await self._written(
            lambda: self.rows.kept(
                bot, ids, error, unsent=unsent, unsent_files=unsent_files, epoch=epoch
            ),
            first,
        )
        log.warning("outbox: %d message(s) to %s kept (%s)", len(ids), first.address, error)
        queue.rows = [replace(row, state="kept", error=error) for row in queue.rows]
        if unsent is not None:
            queue.rows[0] = replace(queue.rows[0], text=unsent, files=unsent_files)
        for row in queue.rows:
            self._resolve(queue, row, Delivery("kept", error))
        return after if after is not None and after > 0 else 0.0

    async def _maybe(
        self, address: Address, queue: _Queue, row: OutboxRow, exc: MaybeDelivered
    ) -> None:
        error = str(exc)
        note = unsure_note(row, restarted=False)
        resend = exc.resend is not None and note is not None and not is_resend(row)
        epoch = self._epoch(address.bot)

        async def settle() -> OutboxRow | None:
            if not resend:
                return await self.rows.maybe(row, error, note, epoch=epoch)
            # What the person must get is sent once more, labelled; both rows are kept.
            return await self.rows.resend(
                row, error, exc.resend or "", exc.resend_files,
                key=f"{RESEND_KEY}{row.id}", epoch=epoch,
            )  # fmt: skip

        note_row = await self._written(settle, row)
        log.warning("outbox: row %d to %s may not have arrived: %s", row.id, address, error)
        self._resolve(queue, row, Delivery("maybe", error))
        if note_row is not None:
            queue.add(note_row, first=True)  # said next, right after what it speaks of

    async def _settle(
        self, address: Address, queue: _Queue, row: OutboxRow, state: State, error: str
    ) -> None:
        bot, epoch = address.bot, self._epoch(address.bot)
        await self._written(lambda: self.rows.failed(bot, row.id, error, epoch=epoch), row)
        self._resolve(queue, row, Delivery(state, error))

    def _resolve(
        self, queue: _Queue, row: OutboxRow, delivery: Delivery, *, drop: bool = False
    ) -> None:
        if drop or delivery.state != "kept":
            queue.rows = [queued for queued in queue.rows if queued.id != row.id]
        future = queue.waiters.pop(row.id, None)
        if future is not None and not future.done():
            future.set_result(delivery)

    @staticmethod
    def _give_up(queue: _Queue, exc: StaleEpoch) -> None:
        """A stale sender: its rows are another's now. Whoever waits for them learns why."""
        queue.rows = []
        for future in queue.waiters.values():
            if not future.done():
                future.set_exception(exc)
        queue.waiters.clear()

    @staticmethod
    async def _sleep(queue: _Queue, seconds: float, *, wake_early: bool) -> None:
        """Wait out a backoff; a new row ends it early unless the platform named the wait."""
        queue.waiting = True
        try:
            if not wake_early:
                await asyncio.sleep(seconds)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.wake.wait(), seconds)
        finally:
            queue.waiting = False

    # ------------------------------------------------------------ posted by a channel

    @contextlib.asynccontextmanager
    async def posting(
        self, address: Address, text: str, *, kind: Kind = "question"
    ) -> AsyncIterator[Posted]:
        """A message the channel posts itself, because it waits on it (a question with
        buttons): its row is written `sending` first, then marked by how the post went; the
        channel sets `platform_id`. Not queued: it goes now, or the wait fails."""
        bot, epoch = address.bot, self._epoch(address.bot)
        row_id = await self.rows.add_sending(address, kind, text, epoch=epoch)
        posted = Posted(row_id)
        try:
            yield posted
        except MaybeDelivered as exc:
            await self.rows.unsure(bot, row_id, str(exc), epoch=epoch)
            raise
        except BaseException as exc:
            why = str(exc) or type(exc).__name__
            await asyncio.shield(self.rows.failed(bot, row_id, why, epoch=epoch))
            raise
        await self.rows.delivered(bot, row_id, posted.platform_id, epoch=epoch)

    async def drained(self) -> None:
        """Until no row waits for its first try (kept ones wait for the platform): what a
        test or a caller that must see the sends done awaits."""
        while not all(queue.settled() for queue in self._queues.values()):  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # polled: the states it waits for have no one event

    # ------------------------------------------------------------ stopping

    async def forget(self, bot: str, why: str) -> None:
        """Stop sending the bot's rows (this node lost the bot's lease): its queues' workers
        end, whoever waits learns why, and the rows stay in the store for the bot's next
        owner to resume."""
        mine = [(address, queue) for address, queue in self._queues.items() if address.bot == bot]
        workers = [queue.worker for _, queue in mine if queue.worker is not None]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for address, queue in mine:
            self._give_up(queue, StaleEpoch(f"outbox of bot {bot}: {why}"))
            if self._queues.get(address) is queue:
                del self._queues[address]

    async def shutdown(self) -> None:
        """Stop every worker. Rows stay as they are in the stores: a start resumes them."""
        workers = [q.worker for q in self._queues.values() if q.worker is not None]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._queues.clear()


__all__ = ["RETRY_CAP", "RETRY_FIRST", "DatabaseOf", "Delivery", "Outbox", "Posted", "StaleEpoch"]
