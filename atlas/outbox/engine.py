"""The seam between the sender and the engine that keeps the outbox's rows.

`OutboxRows` is every change the sender (atlas/outbox/sender.py) and a start's resume
(atlas/outbox/resume.py) make to rows, whichever engine holds them:

- `SqliteOutboxRows`, the embedded default: today's calls of atlas/outbox/rows.py on each bot's
  conversations.db, unchanged (one process sends a home's rows: there is nobody to race).
- `PgOutboxRows` (atlas/store/pg/outbox.py): one `outbox` table for every bot in the home's
  PostgreSQL database, where several processes may send. There a row is *claimed* before it
  is sent (`SELECT ... FOR UPDATE SKIP LOCKED`, then `sending` with the claimer's lease epoch):
  one sender gets it. Every later mark checks that no sender with a newer epoch has taken the
  bot's rows over since (the fence): a stale sender gets `StaleEpoch` and sends nothing more.

`epoch` is the sender's lease epoch for the row's bot (atlas/cluster/ grants leases; 0 where
there are none). The SQLite rows ignore it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from atlas.channels.base import Address
from atlas.errors import AtlasError
from atlas.outbox.rows import (
    Kind,
    OutboxRow,
    add_row,
    get_row,
    insert_row,
    mark_delivered,
    mark_failed,
    mark_kept,
    mark_maybe,
    mark_sending,
    mark_unsure,
    open_rows,
)
from atlas.store.db import write_transaction

if TYPE_CHECKING:
    from atlas.store.db import Database

DatabaseOf = Callable[[str], Awaitable["Database"]]  # a bot's name → its conversations.db


class StaleEpoch(AtlasError):
    """A sender whose lease epoch is older than the newest that touched the bot's rows: another
    sender took them over. It must send nothing more for that bot."""


@runtime_checkable
class OutboxRows(Protocol):
    """Every change of the outbox's rows; see the module's docstring."""

    async def close(self) -> None: ...

    async def add(
        self,
        address: Address,
        kind: Kind,
        text: str,
        files: tuple[Path, ...] = (),
        *,
        key: str | None = None,
    ) -> OutboxRow:
        """A new pending row, or the one `key` names already, as stored."""
        ...

    async def add_sending(self, address: Address, kind: Kind, text: str, *, epoch: int) -> int:
        """A row a channel posts itself (a question): written `sending`, claimed by `epoch`."""
        ...

    async def get(self, bot: str, row_id: int) -> OutboxRow | None: ...

    async def open_rows(self, bot: str, *, before: str) -> list[OutboxRow]:
        """The bot's unsettled rows made before `before` (UTC ISO), oldest first."""
        ...

    async def claim(self, bot: str, row_id: int, *, epoch: int) -> bool:
        """Mark the row `sending` for this sender; False when another sender has it or it is
        settled (then it must not be sent)."""
        ...

    async def delivered(
        self, bot: str, row_id: int, platform_id: str | None, *, epoch: int
    ) -> None: ...

    async def failed(self, bot: str, row_id: int, error: str, *, epoch: int) -> None: ...

    async def unsure(self, bot: str, row_id: int, error: str, *, epoch: int) -> None:
        """`maybe` without a note (a question: the turn that asked answers for it)."""
        ...

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
        """An outage: the rows kept for a later try, in one transaction."""
        ...

    async def maybe(
        self, row: OutboxRow, error: str, note: str | None, *, epoch: int
    ) -> OutboxRow | None:
        """`maybe` and, in the same transaction, the note about it queued once; the note's row."""
        ...

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
        """`maybe` without a note and, in the same transaction, a new row sending `text` again."""
        ...


class SqliteOutboxRows:
    """The rows in each bot's conversations.db: atlas/outbox/rows.py as the sender always
    called it (point changes committed by themselves, `db.quick`; several rows or a row and a
    note in one `write_transaction`)."""

    def __init__(self, database: DatabaseOf) -> None:
        self._open_database = database
        self._databases: dict[str, Database] = {}

    async def database(self, bot: str) -> Database:
        """The bot's conversations.db, kept once open: every row's marks use it."""
        db = self._databases.get(bot)
        if db is None or not db.is_open:
            db = self._databases[bot] = await self._open_database(bot)
        return db

    async def close(self) -> None:
        """Nothing of its own: the databases belong to whoever opened them."""

    async def _quick(self, bot: str, write: Callable[[Any], Any]) -> Any:
        return await (await self.database(bot)).quick(write)

    async def add(
        self,
        address: Address,
        kind: Kind,
        text: str,
        files: tuple[Path, ...] = (),
        *,
        key: str | None = None,
    ) -> OutboxRow:
        # One statement, committed by itself; with `key`, perhaps a row made before and
        # settled since: as stored.
        return await self._quick(
            address.bot, lambda conn: add_row(conn, address, kind, text, files, key=key)
        )

    async def add_sending(self, address: Address, kind: Kind, text: str, *, epoch: int) -> int:
        return await self._quick(
            address.bot, lambda conn: insert_row(conn, address, kind, text, state="sending")
        )

    async def get(self, bot: str, row_id: int) -> OutboxRow | None:
        return await self._quick(bot, lambda conn: get_row(conn, row_id, bot))

    async def open_rows(self, bot: str, *, before: str) -> list[OutboxRow]:
        db = await self.database(bot)
        return await db.call(lambda conn: open_rows(conn, bot, before=before))

    async def claim(self, bot: str, row_id: int, *, epoch: int) -> bool:
        await self._quick(bot, lambda conn: mark_sending(conn, row_id))
        return True  # one process sends a home's SQLite rows: nobody else claims them

    async def delivered(
        self, bot: str, row_id: int, platform_id: str | None, *, epoch: int
    ) -> None:
        await self._quick(bot, lambda conn: mark_delivered(conn, row_id, platform_id))

    async def failed(self, bot: str, row_id: int, error: str, *, epoch: int) -> None:
        await self._quick(bot, lambda conn: mark_failed(conn, row_id, error))

    async def unsure(self, bot: str, row_id: int, error: str, *, epoch: int) -> None:
        await self._quick(bot, lambda conn: mark_unsure(conn, row_id, error))

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
        def keep(conn: Any) -> None:
            with write_transaction(conn):
                mark_kept(conn, row_ids, error, unsent=unsent, unsent_files=unsent_files)

        await self._quick(bot, keep)

    async def maybe(
        self, row: OutboxRow, error: str, note: str | None, *, epoch: int
    ) -> OutboxRow | None:
        def settle(conn: Any) -> OutboxRow | None:
            with write_transaction(conn):
                return mark_maybe(conn, row, error, note)

        return await self._quick(row.address.bot, settle)

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
        def settle(conn: Any) -> OutboxRow:
            with write_transaction(conn):
                mark_unsure(conn, row.id, error)
                return add_row(
                    conn, row.address, row.kind, text, files, message_id=row.message_id, key=key
                )

        return await self._quick(row.address.bot, settle)


__all__ = ["DatabaseOf", "OutboxRows", "SqliteOutboxRows", "StaleEpoch"]
