"""Channel pairing on PostgreSQL: the same rows and rules as atlas.db's
(atlas/channels/pairing_store.py `PairingEngine`).

atlas.db has one writer, so a request's check and insert, or a decision's read and writes,
never interleave. Here several processes, on several machines, may ask at once:

- a request takes a transaction-level advisory lock on the person (bot, platform, user), so
  two messages of one stranger at once give one pending code, not two;
- a decision reads the code `FOR UPDATE`, so of two approvals at once the second waits for the
  first and then finds the code no longer pending (a clear AtlasError, as on SQLite).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from atlas.channels.pairing_store import check_decidable, may_request, paired_user_row
from atlas.store.pg.server import PgServer

CODE_COLUMNS = (
    "code",
    "bot",
    "platform",
    "user_id",
    "user_name",
    "chat",
    "created_at",
    "expires_at",
    "status",
    "decided_at",
)
PAIRED_COLUMNS = ("bot", "platform", "user_id", "user_name", "code", "approved_at")


def _insert_sql(table: str, columns: tuple[str, ...]) -> str:
    marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"


class PgPairing:
    """Pairing codes and paired users on a shared, open PgServer."""

    def __init__(self, server: PgServer) -> None:
        self.server = server

    async def paired(self, bot: str, platform: str, user_id: str) -> bool:
        found = await self.server.pool.fetchval(
            "SELECT 1 FROM paired_users WHERE bot = $1 AND platform = $2 AND user_id = $3",
            bot,
            platform,
            user_id,
        )
        return found is not None

    async def request_code(self, row: dict[str, Any], moment: datetime) -> dict[str, Any] | None:
        async with self.server.pool.acquire() as conn, conn.transaction():
            # One request per person at a time, across every process of the home.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                "\x1f".join(("pairing", row["bot"], row["platform"], row["user_id"])),
            )
            codes = await conn.fetch(
                "SELECT status, expires_at FROM pairing_codes "
                "WHERE bot = $1 AND platform = $2 AND user_id = $3",
                row["bot"],
                row["platform"],
                row["user_id"],
            )
            if not may_request([dict(code) for code in codes], moment):
                return None
            await conn.execute(
                _insert_sql("pairing_codes", CODE_COLUMNS), *(row[c] for c in CODE_COLUMNS)
            )
        return row

    async def withdraw_code(self, code: str) -> None:
        await self.server.pool.execute(
            "DELETE FROM pairing_codes WHERE code = $1 AND status = 'pending'", code
        )

    async def decide_code(self, code: str, verdict: str, moment: datetime) -> dict[str, Any]:
        async with self.server.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch("SELECT * FROM pairing_codes WHERE code = $1 FOR UPDATE", code)
            row = check_decidable([dict(found) for found in rows], code, moment)
            await conn.execute(
                "UPDATE pairing_codes SET status = $1, decided_at = $2 WHERE code = $3",
                verdict,
                moment.isoformat(),
                code,
            )
            if verdict == "approved":
                paired = paired_user_row(row, moment)
                await conn.execute(
                    _insert_sql("paired_users", PAIRED_COLUMNS)
                    + " ON CONFLICT (bot, platform, user_id) DO UPDATE SET "
                    "user_name = EXCLUDED.user_name, code = EXCLUDED.code, "
                    "approved_at = EXCLUDED.approved_at",
                    *(paired[c] for c in PAIRED_COLUMNS),
                )
        return {**row, "status": verdict}

    async def codes(self) -> list[dict[str, Any]]:
        rows = await self.server.pool.fetch("SELECT * FROM pairing_codes ORDER BY created_at DESC")
        return [dict(row) for row in rows]

    async def paired_users(self) -> list[dict[str, Any]]:
        rows = await self.server.pool.fetch("SELECT * FROM paired_users ORDER BY approved_at")
        return [dict(row) for row in rows]

    async def pending_count(self, now: str) -> int:
        count = await self.server.pool.fetchval(
            "SELECT count(*) FROM pairing_codes WHERE status = 'pending' AND expires_at > $1", now
        )
        return int(count)
