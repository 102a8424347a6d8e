"""The outbox's rows in the home's PostgreSQL database: one `outbox` table for every bot
(schema step 10), where several processes may send (atlas/outbox/engine.py `OutboxRows`).

Exactly once across processes:

- **Claim**: a row is locked with `FOR UPDATE SKIP LOCKED` and marked `sending` with the
  claimer's lease epoch only while it is `pending` or `kept`; a second sender skips the locked
  row or finds it `sending` and gets nothing. `claim_batch` hands out several rows that way.
- **Fence**: `outbox_fences` holds, per bot, the newest epoch that has written its rows (every
  claim and mark raises it to the sender's epoch first). Every claim and mark reads it under
  `FOR SHARE` in its own transaction and refuses (`StaleEpoch`) when it is above the sender's:
  an old owner paused past its lease cannot mark, claim or post once the new owner has written
  (a claim, or a start's resume settling what the old one left). The share lock makes a raise
  wait for marks in flight, so none slips past it.
- A mark touches only a row that is unsettled and not claimed by a newer epoch.

Times are UTC ISO 8601 text, as in SQLite, so rows copy across unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg

from atlas.channels.base import Address
from atlas.outbox.engine import StaleEpoch
from atlas.outbox.rows import Kind, OutboxRow, Outgoing, State, files_json, row_from
from atlas.store.db import utc_now_iso
from atlas.store.pg.server import PgServer
from atlas.store.pg.text import words_text, words_vector

if TYPE_CHECKING:
    from atlas.cluster.leases import Fence

_COLUMNS = (
    'id, bot, channel, chat, thread, "user", kind, text, files, message_id, key, '
    "state, attempts, error, platform_id, created_at, sending_at, settled_at, epoch"
)
_INSERT = (
    'INSERT INTO outbox (bot, channel, chat, thread, "user", kind, text, files, message_id, '
    "key, state, epoch, created_at, sending_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) "
    f"ON CONFLICT (bot, key) WHERE key IS NOT NULL DO NOTHING RETURNING {_COLUMNS}"
)
# A row this sender may still mark: not settled, and not claimed since by a newer epoch.
_MINE = "bot = $1 AND settled_at IS NULL AND (epoch IS NULL OR epoch <= $2)"


def _row(record: asyncpg.Record) -> OutboxRow:
    return row_from(dict(record), record["bot"])


async def insert_row(
    conn: asyncpg.Connection,
    address: Address,
    kind: Kind,
    text: str,
    files: tuple[Path, ...] | list[Path] = (),
    *,
    message_id: int | None = None,
    key: str | None = None,
    state: State = "pending",
    epoch: int | None = None,
    now: str | None = None,
) -> OutboxRow:
    """A new row, or (with `key` stored already for the bot) that row, as stored."""
    now = now or utc_now_iso()
    made = await conn.fetchrow(
        _INSERT,
        address.bot,
        address.channel,
        address.chat,
        address.thread,
        address.user,
        kind,
        text,
        files_json(files),
        message_id,
        key,
        state,
        epoch,
        now,
        now if state == "sending" else None,
    )
    if made is None:
        made = await conn.fetchrow(
            f"SELECT {_COLUMNS} FROM outbox WHERE bot = $1 AND key = $2", address.bot, key
        )
    return _row(made)


def written_with(outgoing: Outgoing) -> Any:
    """What `PgConversationStore.append(..., also=...)` runs in the message's transaction:
    the rows that deliver it (as `Outgoing` does on SQLite), collected in `outgoing.rows`."""

    async def write(conn: asyncpg.Connection, message_id: int) -> None:
        now = utc_now_iso()
        written = [(note, (), "note", None) for note in outgoing.notes]
        written.append((outgoing.text, outgoing.files, outgoing.kind, message_id))
        for text, files, kind, stored_id in written:
            outgoing.rows.append(
                await insert_row(
                    conn, outgoing.address, kind, text, files, message_id=stored_id, now=now
                )
            )

    return write


class PgOutboxRows:
    """Every bot's outbox rows on a shared, open PgServer; see the module's docstring."""

    def __init__(self, server: PgServer) -> None:
        self.server = server
        self._raised: dict[str, int] = {}  # the fence this process last raised, per bot
        # On a node (`atlas run --node`): the bot's lease fence, None when not held. Every
        # claim and mark then also checks the lease in its own transaction, so a node whose
        # lease expired sends nothing even before the next owner has claimed a row.
        self.lease_fence: Callable[[str], Fence | None] | None = None

    async def close(self) -> None:
        """Nothing of its own to close: the pool belongs to the server."""

    # ------------------------------------------------------------ the fence

    async def _raise_fence(self, bot: str, epoch: int) -> None:
        """Record `epoch` as the bot's newest sender (never lowering it). Its own short
        transaction, and only when this process has not raised it that far already: a raise
        locks the bot's fence row, which every mark reads."""
        if self._raised.get(bot, -1) >= epoch:
            return
        await self.server.pool.execute(
            "INSERT INTO outbox_fences (bot, epoch) VALUES ($1, $2) ON CONFLICT (bot) "
            "DO UPDATE SET epoch = EXCLUDED.epoch WHERE outbox_fences.epoch < EXCLUDED.epoch",
            bot,
            epoch,
        )
        self._raised[bot] = epoch

    @staticmethod
    async def _check_fence(conn: asyncpg.Connection, bot: str, epoch: int) -> None:
        """Inside the caller's transaction: refuse when a newer epoch has claimed the bot's rows."""
        newest = await conn.fetchval(
            "SELECT epoch FROM outbox_fences WHERE bot = $1 FOR SHARE", bot
        )
        if newest is not None and newest > epoch:
            raise StaleEpoch(
                f"outbox of bot {bot}: this sender's lease epoch {epoch} is stale (epoch "
                f"{newest} has taken its rows over); it sends nothing more"
            )

    @contextlib.asynccontextmanager
    async def _fenced(self, bot: str, epoch: int) -> AsyncIterator[asyncpg.Connection]:
        """A transaction of this sender's, the fence raised to its epoch first (a new owner's
        first write, a claim or a start's resume alike, shuts the old owner out) and checked."""
        lease = None
        if self.lease_fence is not None:
            lease = self.lease_fence(bot)
            if lease is None:
                raise StaleEpoch(f"outbox of bot {bot}: this node does not hold its lease")
        await self._raise_fence(bot, epoch)
        async with self.server.pool.acquire() as conn, conn.transaction():
            if lease is not None:
                from atlas.cluster.leases import FenceError

                try:
                    await lease.check(conn)
                except FenceError as exc:
                    raise StaleEpoch(f"outbox of bot {bot}: {exc}") from None
            await self._check_fence(conn, bot, epoch)
            yield conn

    async def _mark(self, bot: str, epoch: int, sql: str, *args: Any) -> None:
        """One fenced UPDATE of rows that must still be this sender's ($1 bot, $2 epoch)."""
        async with self._fenced(bot, epoch) as conn:
            if await conn.fetchval(sql, bot, epoch, *args) == 0:
                raise StaleEpoch(
                    f"outbox of bot {bot}: the row is settled or claimed by a newer sender "
                    f"than epoch {epoch}; not marked"
                )

    # ------------------------------------------------------------ rows in

    async def add(
        self,
        address: Address,
        kind: Kind,
        text: str,
        files: tuple[Path, ...] = (),
        *,
        key: str | None = None,
    ) -> OutboxRow:
        async with self.server.pool.acquire() as conn:
            return await insert_row(conn, address, kind, text, files, key=key)

    async def add_sending(self, address: Address, kind: Kind, text: str, *, epoch: int) -> int:
        async with self._fenced(address.bot, epoch) as conn:
            row = await insert_row(conn, address, kind, text, state="sending", epoch=epoch)
        return row.id

    async def get(self, bot: str, row_id: int) -> OutboxRow | None:
        found = await self.server.pool.fetchrow(
            f"SELECT {_COLUMNS} FROM outbox WHERE id = $1 AND bot = $2", row_id, bot
        )
        return _row(found) if found else None

    async def open_rows(self, bot: str, *, before: str) -> list[OutboxRow]:
        found = await self.server.pool.fetch(
            f"SELECT {_COLUMNS} FROM outbox WHERE bot = $1 AND settled_at IS NULL "
            "AND state IN ('pending', 'sending', 'kept') AND created_at < $2 ORDER BY id",
            bot,
            before,
        )
        return [_row(record) for record in found]

    # ------------------------------------------------------------ claims

    async def claim(self, bot: str, row_id: int, *, epoch: int) -> bool:
        return bool(await self._claim(bot, epoch, "AND id = $3", row_id, 1))

    async def claim_batch(self, bot: str, *, epoch: int, limit: int = 10) -> list[OutboxRow]:
        """Up to `limit` of the bot's pending or kept rows, oldest first, claimed by this
        sender: no other sender gets any of them."""
        return await self._claim(bot, epoch, "", None, limit)

    async def _claim(
        self, bot: str, epoch: int, which: str, row_id: int | None, limit: int
    ) -> list[OutboxRow]:
        params: list[Any] = [bot, limit] + ([row_id] if row_id is not None else [])
        async with self._fenced(bot, epoch) as conn:
            ids = [
                record["id"]
                for record in await conn.fetch(
                    "SELECT id FROM outbox WHERE bot = $1 AND settled_at IS NULL "
                    f"AND state IN ('pending', 'kept') {which} ORDER BY id LIMIT $2 "
                    "FOR UPDATE SKIP LOCKED",
                    *params,
                )
            ]
            if not ids:
                return []
            claimed = await conn.fetch(
                "UPDATE outbox SET state = 'sending', attempts = attempts + 1, sending_at = $2, "
                f"epoch = $3 WHERE id = ANY($1::bigint[]) RETURNING {_COLUMNS}",
                ids,
                utc_now_iso(),
                epoch,
            )
        return sorted((_row(record) for record in claimed), key=lambda row: row.id)

    # ------------------------------------------------------------ marks

    async def delivered(
        self, bot: str, row_id: int, platform_id: str | None, *, epoch: int
    ) -> None:
        await self._mark(
            bot,
            epoch,
            "WITH marked AS (UPDATE outbox SET state = 'delivered', platform_id = $4, "
            f"error = NULL, settled_at = $5 WHERE id = $3 AND {_MINE} RETURNING 1) "
            "SELECT count(*) FROM marked",
            row_id,
            platform_id,
            utc_now_iso(),
        )

    async def failed(self, bot: str, row_id: int, error: str, *, epoch: int) -> None:
        await self._settle(bot, row_id, "failed", error, epoch)

    async def unsure(self, bot: str, row_id: int, error: str, *, epoch: int) -> None:
        await self._settle(bot, row_id, "maybe", error, epoch)

    async def _settle(self, bot: str, row_id: int, state: State, error: str, epoch: int) -> None:
        await self._mark(
            bot,
            epoch,
            "WITH marked AS (UPDATE outbox SET state = $4, error = $5, settled_at = $6 "
            f"WHERE id = $3 AND {_MINE} RETURNING 1) SELECT count(*) FROM marked",
            row_id,
            state,
            error,
            utc_now_iso(),
        )

    async def kept(
        self,
        bot: str,
        row_ids: list[int],
        error: str,
        *,
        unsent: str | None = None,
        unsent_files: tuple[Path, ...] = (),
        epoch: int,
    ) -> None:
        async with self._fenced(bot, epoch) as conn:
            if unsent is not None and row_ids:
                await conn.execute(
                    f"UPDATE outbox SET text = $3, files = $4 WHERE id = $5 AND {_MINE}",
                    bot,
                    epoch,
                    unsent,
                    files_json(unsent_files),
                    row_ids[0],
                )
            # The first row is the one this sender tried; a row behind it that is `sending`
            # is another sender's (one serving the same address), not ours to keep.
            await conn.execute(
                "UPDATE outbox SET state = 'kept', error = $3 "
                f"WHERE id = ANY($4::bigint[]) AND {_MINE} "
                "AND (state IN ('pending', 'kept') OR id = $5)",
                bot,
                epoch,
                error,
                row_ids,
                row_ids[0] if row_ids else None,
            )

    async def maybe(
        self, row: OutboxRow, error: str, note: str | None, *, epoch: int
    ) -> OutboxRow | None:
        bot = row.address.bot
        async with self._fenced(bot, epoch) as conn:
            await self._settle_in(conn, row.id, bot, "maybe", error, epoch)
            if note is None:
                return None
            message_id = (
                await self._store_note(conn, bot, row.message_id, note)
                if row.message_id is not None
                else None
            )
            return await insert_row(
                conn, row.address, "notice", note, message_id=message_id, key=f"maybe:{row.id}"
            )

    async def resend(
        self,
        row: OutboxRow,
        error: str,
        text: str,
        files: tuple[Path, ...],
        *,
        key: str,
        epoch: int,
    ) -> OutboxRow:
        bot = row.address.bot
        async with self._fenced(bot, epoch) as conn:
            await self._settle_in(conn, row.id, bot, "maybe", error, epoch)
            return await insert_row(
                conn, row.address, row.kind, text, files, message_id=row.message_id, key=key
            )

    @staticmethod
    async def _settle_in(
        conn: asyncpg.Connection, row_id: int, bot: str, state: State, error: str, epoch: int
    ) -> None:
        changed = await conn.fetchval(
            "WITH marked AS (UPDATE outbox SET state = $4, error = $5, settled_at = $6 "
            f"WHERE id = $3 AND {_MINE} RETURNING 1) SELECT count(*) FROM marked",
            bot,
            epoch,
            row_id,
            state,
            error,
            utc_now_iso(),
        )
        if changed == 0:
            raise StaleEpoch(
                f"outbox of bot {bot}: row {row_id} is settled or claimed by a newer sender "
                f"than epoch {epoch}; not marked"
            )

    @staticmethod
    async def _store_note(
        conn: asyncpg.Connection, bot: str, answer_id: int, note: str
    ) -> int | None:
        """The note as an assistant message after the answer it speaks for, with the same
        `answers_upto` (as atlas/outbox/rows.py does on SQLite)."""
        return await conn.fetchval(
            "WITH stored AS (INSERT INTO messages (bot, conversation_id, role, content, kind, "
            "answers_upto, created_at, words) SELECT bot, conversation_id, 'assistant', $1, "
            f"'message', answers_upto, $2, {words_vector('$3')} FROM messages "
            "WHERE id = $4 AND bot = $5 RETURNING id, conversation_id, created_at), "
            "touched AS (UPDATE conversations SET updated_at = stored.created_at FROM stored "
            "WHERE conversations.id = stored.conversation_id) SELECT id FROM stored",
            note,
            utc_now_iso(),
            words_text(note),
            answer_id,
            bot,
        )


__all__ = ["PgOutboxRows", "insert_row", "written_with"]
