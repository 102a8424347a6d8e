"""The one place a home's engines are opened from its settings.

With no `[store] url` (the embedded default) these are today's objects: atlas.db's `HomeStore`
(the gate's log, delegations, pairing, routines, the executors' records, the dashboard's
reads, `/new` generations, all over its one writer thread) and a `ConversationStore` per bot
file, the outbox rows in each bot's conversations.db. With a url, one `PgServer` (its password
from the environment variable `[store] password_env` names) and the PostgreSQL side of every
seam (docs/scaling.md). The daemon holds one `HomeEngines`; the runtime, the dispatcher's
outbox, the routine scheduler, the channels' pairing, the executors' records and the dashboard
take their engine from it, so a home on PostgreSQL never writes its data into SQLite files.

What is still atlas.db's own SQL (`HomeStore.call` and `quick`) is not on PostgreSQL: reaching
it on a PostgreSQL home raises `NotOnPostgres` (atlas/errors.py), naming what was asked, never
a silent write to the SQLite file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from atlas.errors import AtlasError
from atlas.home import Bot, Home
from atlas.store.home_db import HomeStore

if TYPE_CHECKING:
    from atlas.channels.chat_common import GenerationRows
    from atlas.channels.pairing_store import PairingEngine
    from atlas.dashboard.reads import DashboardReads
    from atlas.executors.record_rows import RecordRows
    from atlas.outbox.engine import OutboxRows
    from atlas.routines.engine import RoutineEngine
    from atlas.store.engine import ConversationEngine
    from atlas.store.pg.server import PgServer

log = logging.getLogger(__name__)


def _redact(url: str) -> str:
    from atlas.store.pg.server import redact_url

    return redact_url(url)


class HomeEngines:
    """Every engine a running home uses, chosen by `[store] url`; see the module docstring.

    `epoch`: the lease epoch this process's outbox claims rows with, one for every bot or per
    bot (a function of its name, as `Outbox` takes it); 0: one node, no leases."""

    def __init__(
        self,
        home: Home,
        *,
        audit: HomeStore | None = None,
        server: PgServer | None = None,
        epoch: int | Callable[[str], int] = 0,
    ) -> None:
        from atlas.channels.chat_common import SqliteGenerations
        from atlas.channels.pairing_store import SqlitePairing
        from atlas.dashboard.reads import SqliteDashboardReads
        from atlas.executors.record_rows import SqliteRecordRows
        from atlas.routines.store import RoutineStore

        self.home = home
        self.server = server
        self.epoch = epoch
        self.pairing: PairingEngine
        self.records: RecordRows
        self.reads: DashboardReads
        self.routines: RoutineEngine
        self.generations: GenerationRows
        self.outbox_rows: OutboxRows | None  # None: each bot's conversations.db
        if server is None and home.settings.store.url is not None:
            # Never a PostgreSQL home's data in its SQLite files: its engines open the server.
            raise AtlasError(
                f"this home's store is PostgreSQL ({_redact(home.settings.store.url)}): its "
                "engines are opened with `await HomeEngines.open(home)`, not atlas.db's"
            )
        if server is None:
            # atlas.db; in a worker process, a RemoteHomeStore whose SQL runs in the home's.
            self.audit: Any = HomeStore(home.db_path) if audit is None else audit
            self.pairing = SqlitePairing(self.audit)
            self.records = SqliteRecordRows(self.audit)
            self.reads = SqliteDashboardReads(self.audit)
            self.routines = RoutineStore(self.audit)
            self.generations = SqliteGenerations(self.audit)
            self.outbox_rows = None
            return
        if audit is not None:
            raise AtlasError("a home on PostgreSQL has no atlas.db HomeStore to hand in")
        from atlas.store.pg.dashboard import PgDashboardReads
        from atlas.store.pg.executors import PgRecordRows
        from atlas.store.pg.generations import PgGenerations
        from atlas.store.pg.home_state import PgHomeAudit
        from atlas.store.pg.outbox import PgOutboxRows
        from atlas.store.pg.pairing import PgPairing
        from atlas.store.pg.routines import PgRoutineStore

        self.audit = PgHomeAudit(server)
        self.pairing = PgPairing(server)
        self.records = PgRecordRows(server)
        self.reads = PgDashboardReads(server)
        self.routines = PgRoutineStore(server)
        self.generations = PgGenerations(server)
        self.outbox_rows = PgOutboxRows(server)

    @property
    def on_postgres(self) -> bool:
        return self.server is not None

    @property
    def where(self) -> str:
        """Where the home's state is, for messages (no password)."""
        return self.server.where if self.server is not None else str(self.home.db_path)

    @classmethod
    async def open(
        cls, home: Home, *, audit: HomeStore | None = None, epoch: int | Callable[[str], int] = 0
    ) -> HomeEngines:
        """The home's engines; with a url, its server reached and its schema brought up to date
        first (an unreachable server raises an AtlasError naming the url, never its
        password, and what failed)."""
        url = home.settings.store.url
        if url is None:
            return cls(home, audit=audit, epoch=epoch)
        from atlas.store.pg.server import PgServer

        server = PgServer(url, home.settings.store.password())
        await server.open()
        log.info("store: PostgreSQL at %s", server.where)
        return cls(home, server=server, epoch=epoch)

    def conversations(self, bot: Bot) -> ConversationEngine:
        """The bot's conversation store, not opened yet."""
        if self.server is None:
            from atlas.store.conversations import ConversationStore

            return ConversationStore(bot.db_path)
        from atlas.store.pg.conversations import PgConversationStore

        return PgConversationStore(self.server, bot.name)

    async def close(self) -> None:
        await self.audit.close()
        if self.server is not None:
            await self.server.close()


__all__ = ["HomeEngines"]
