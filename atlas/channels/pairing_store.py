"""The seam between channel pairing (atlas/channels/access.py) and the engine that keeps it.

`PairingEngine` is what pairing asks of the home's shared state, whichever engine holds it:
the pairing codes strangers are given and the people approved through them. `SqlitePairing`
is today's SQL over atlas.db, unchanged (closures on the HomeStore's writer thread, which
serialises them); `atlas/store/pg/pairing.py` keeps the same rows in PostgreSQL, where
processes on several machines may ask at once, so it locks what SQLite's one writer did.

The rules (one live code per person, a denied person gets none, a decision only on a pending
code) are the same on both: `may_request` and `status_of` below are shared.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from atlas.errors import AtlasError
from atlas.store.db import write_transaction

if TYPE_CHECKING:
    import sqlite_utils  # loaded through atlas.store, which keeps pandas out

    from atlas.store.home_db import HomeStore


@runtime_checkable
class PairingEngine(Protocol):
    """Pairing codes and paired users; rows are dicts of the `pairing_codes` and
    `paired_users` columns (atlas/store/home_db.py), times UTC ISO 8601 text."""

    async def paired(self, bot: str, platform: str, user_id: str) -> bool: ...

    async def request_code(
        self, row: dict[str, Any], moment: datetime
    ) -> dict[str, Any] | None: ...

    async def withdraw_code(self, code: str) -> None: ...

    async def decide_code(self, code: str, verdict: str, moment: datetime) -> dict[str, Any]: ...

    async def codes(self) -> list[dict[str, Any]]: ...

    async def paired_users(self) -> list[dict[str, Any]]: ...

    async def pending_count(self, now: str) -> int: ...


def status_of(row: dict[str, Any], moment: datetime) -> str:
    """A code's status as a person sees it: a pending code past its time is expired."""
    status = str(row["status"])
    if status == "pending" and datetime.fromisoformat(row["expires_at"]) <= moment:
        return "expired"
    return status


def may_request(codes: Iterable[dict[str, Any]], moment: datetime) -> bool:
    """Whether a person with these codes (of one bot and platform) may get a new one: not when
    they were denied, nor while a code of theirs is still pending."""
    return all(row["status"] != "denied" and status_of(row, moment) != "pending" for row in codes)


def check_decidable(rows: list[dict[str, Any]], code: str, moment: datetime) -> dict[str, Any]:
    """The code's row when it can be approved or denied now; AtlasError naming why not."""
    if not rows:
        raise AtlasError(f"no pairing code {code!r}; `atlas pairing list` shows pending ones")
    status = status_of(rows[0], moment)
    if status != "pending":
        raise AtlasError(f"pairing code {code} is {status}, not pending")
    return rows[0]


def paired_user_row(row: dict[str, Any], moment: datetime) -> dict[str, Any]:
    """The `paired_users` row an approval of the code's `row` writes."""
    return {
        "bot": row["bot"],
        "platform": row["platform"],
        "user_id": row["user_id"],
        "user_name": row["user_name"],
        "code": row["code"],
        "approved_at": moment.isoformat(),
    }


class SqlitePairing:
    """Pairing on atlas.db (a HomeStore, or a worker's remote one): today's SQL."""

    def __init__(self, store: HomeStore) -> None:
        self.store = store

    async def paired(self, bot: str, platform: str, user_id: str) -> bool:
        def find(db: sqlite_utils.Database) -> bool:
            rows = db.query(
                "SELECT 1 FROM paired_users WHERE bot = ? AND platform = ? AND user_id = ?",
                [bot, platform, user_id],
            )
            return next(iter(rows), None) is not None

        return await self.store.quick(find)

    async def request_code(self, row: dict[str, Any], moment: datetime) -> dict[str, Any] | None:
        def create(db: sqlite_utils.Database) -> dict[str, Any] | None:
            rows = db.query(
                "SELECT status, expires_at FROM pairing_codes "
                "WHERE bot = ? AND platform = ? AND user_id = ?",
                [row["bot"], row["platform"], row["user_id"]],
            )
            if not may_request(rows, moment):
                return None
            db["pairing_codes"].insert(row)
            return row

        return await self.store.call(create)

    async def withdraw_code(self, code: str) -> None:
        def delete(db: sqlite_utils.Database) -> None:
            db.execute("DELETE FROM pairing_codes WHERE code = ? AND status = 'pending'", [code])

        await self.store.call(delete)

    async def decide_code(self, code: str, verdict: str, moment: datetime) -> dict[str, Any]:
        def decide(db: sqlite_utils.Database) -> dict[str, Any]:
            # One transaction from the read to the last write: the connection commits each lone
            # statement itself, and two decisions on one code must not both find it pending.
            with write_transaction(db):
                rows = list(db.query("SELECT * FROM pairing_codes WHERE code = ?", [code]))
                row = check_decidable(rows, code, moment)
                db.execute(
                    "UPDATE pairing_codes SET status = ?, decided_at = ? WHERE code = ?",
                    [verdict, moment.isoformat(), code],
                )
                if verdict == "approved":
                    db["paired_users"].upsert(
                        paired_user_row(row, moment), pk=("bot", "platform", "user_id")
                    )
                return {**row, "status": verdict}

        return await self.store.call(decide)

    async def codes(self) -> list[dict[str, Any]]:
        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(db.query("SELECT * FROM pairing_codes ORDER BY created_at DESC"))

        return await self.store.call(select)

    async def paired_users(self) -> list[dict[str, Any]]:
        def select(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            return list(db.query("SELECT * FROM paired_users ORDER BY approved_at"))

        return await self.store.call(select)

    async def pending_count(self, now: str) -> int:
        def count(db: sqlite_utils.Database) -> int:
            row = db.execute(
                "SELECT COUNT(*) FROM pairing_codes WHERE status = 'pending' AND expires_at > ?",
                [now],
            ).fetchone()
            return int(row[0])

        return await self.store.quick(count)


def pairing_engine(store: HomeStore | PairingEngine) -> PairingEngine:
    """The engine behind `store`: itself when it is one, else atlas.db's SQL over the
    HomeStore (the embedded default, and what every caller of today hands in)."""
    if isinstance(store, PairingEngine):
        return store
    return SqlitePairing(store)
