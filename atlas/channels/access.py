"""Who may talk to a bot: allowed users from bot.toml, plus people paired through a code.

A stranger gets one reply holding an 8-character code and nothing else (no model call). The
owner approves it with `atlas pairing approve CODE`, or denies it; a code expires after an hour.
A stranger with a pending code, or a denied one, gets no further reply: a bot never becomes a
way to spam its owner. In a group the code is never posted for everyone: it goes to the stranger
privately; when that cannot be done (on Telegram a bot may not write first to someone who never
started it), the code is withdrawn and the group is told, at most once an hour per person, to
write to the bot directly. Everything lives in the home's atlas.db, so the CLI and the running
daemon share it with no signal between them. The SQL is behind a seam
(atlas/channels/pairing_store.py): atlas.db by default, PostgreSQL (atlas/store/pg/pairing.py)
for a home on several machines.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from atlas.channels.pairing_store import PairingEngine, pairing_engine, status_of
from atlas.store.home_db import HomeStore

# atlas.db's HomeStore (the embedded default), or a PairingEngine (atlas/channels/pairing_store.py)
Store = HomeStore | PairingEngine

CODE_LENGTH = 8
CODE_LIFETIME = timedelta(hours=1)
# No 0/O, 1/I/L: a code is read off a phone screen and typed into a terminal.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True)
class Pairing:
    code: str
    bot: str
    platform: str
    user_id: str
    user_name: str
    chat: str
    created_at: datetime
    expires_at: datetime
    status: str  # pending | approved | denied | expired

    @classmethod
    def from_row(cls, row: dict[str, Any], now: datetime) -> Pairing:
        return cls(
            code=row["code"],
            bot=row["bot"],
            platform=row["platform"],
            user_id=row["user_id"],
            user_name=row["user_name"] or "",
            chat=row["chat"] or "",
            created_at=datetime.fromisoformat(row["created_at"]),
            expires_at=datetime.fromisoformat(row["expires_at"]),
            status=status_of(row, now),
        )

    def describe(self) -> str:
        who = f"{self.user_name} ({self.user_id})" if self.user_name else self.user_id
        return f"{self.code}  {self.bot} on {self.platform}: {who}  [{self.status}]"


def _now(now: datetime | None) -> datetime:
    return now or datetime.now(UTC)


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


async def is_paired(store: Store, bot: str, platform: str, user_id: str) -> bool:
    return await pairing_engine(store).paired(bot, platform, user_id)


async def request_pairing(
    store: Store,
    bot: str,
    platform: str,
    user_id: str,
    *,
    user_name: str = "",
    chat: str = "",
    now: datetime | None = None,
) -> Pairing | None:
    """A new pending code for this stranger, or None when they must get no reply: a code of
    theirs is still pending, or they were denied."""
    moment = _now(now)
    row = {
        "code": new_code(),
        "bot": bot,
        "platform": platform,
        "user_id": user_id,
        "user_name": user_name,
        "chat": chat,
        "created_at": moment.isoformat(),
        "expires_at": (moment + CODE_LIFETIME).isoformat(),
        "status": "pending",
        "decided_at": "",
    }
    stored = await pairing_engine(store).request_code(row, moment)
    return Pairing.from_row(stored, moment) if stored else None


async def withdraw_pairing(store: Store, code: str) -> None:
    """Forget a pending code that never reached its person, so that they get a new one."""
    await pairing_engine(store).withdraw_code(normalise_code(code))


async def _decide(store: Store, code: str, verdict: str, now: datetime | None) -> Pairing:
    moment = _now(now)
    decided = await pairing_engine(store).decide_code(normalise_code(code), verdict, moment)
    return Pairing.from_row(decided, moment)


async def approve_pairing(store: Store, code: str, *, now: datetime | None = None) -> Pairing:
    """Let the code's person talk to the bot from now on. AtlasError if unknown or not pending."""
    return await _decide(store, code, "approved", now)


async def deny_pairing(store: Store, code: str, *, now: datetime | None = None) -> Pairing:
    """Refuse the code's person: they get no further reply and no new code."""
    return await _decide(store, code, "denied", now)


async def list_pairings(
    store: Store, *, everything: bool = False, now: datetime | None = None
) -> list[Pairing]:
    """Pending codes, newest first; with `everything`, decided and expired ones too."""
    moment = _now(now)
    pairings = [Pairing.from_row(row, moment) for row in await pairing_engine(store).codes()]
    return pairings if everything else [p for p in pairings if p.status == "pending"]


async def paired_users(store: Store) -> list[dict[str, Any]]:
    return await pairing_engine(store).paired_users()


class Access:
    """One bot's gatekeeper on one platform."""

    def __init__(self, store: Store, bot: str, platform: str, allowed: Iterable[str]) -> None:
        self.store = store
        self.bot = bot
        self.platform = platform
        self.allowed = frozenset(str(user) for user in allowed)
        # Strangers told in a group to write directly, and when: told at most once an hour.
        self._told_to_write: dict[str, datetime] = {}

    async def is_allowed(self, user_id: str) -> bool:
        if str(user_id) in self.allowed:
            return True
        return await is_paired(self.store, self.bot, self.platform, str(user_id))

    async def stranger(self, user_id: str, *, user_name: str = "", chat: str = "") -> str | None:
        """The one reply a stranger gets (with a new code), or None to stay silent."""
        pairing = await request_pairing(
            self.store, self.bot, self.platform, str(user_id), user_name=user_name, chat=chat
        )
        if pairing is None:
            return None
        return pairing_reply(pairing.code)

    async def group_stranger(
        self,
        user_id: str,
        send_privately: Callable[[str], Awaitable[bool]],
        *,
        user_name: str = "",
        chat: str = "",
        now: datetime | None = None,
    ) -> str | None:
        """A stranger spoke in a group: their code goes to them privately (`send_privately`
        returns whether it arrived). Returns what to post in the group, never holding the code,
        or None to stay silent."""
        moment = _now(now)
        pairing = await request_pairing(
            self.store,
            self.bot,
            self.platform,
            str(user_id),
            user_name=user_name,
            chat=chat,
            now=moment,
        )
        if pairing is None:
            return None
        if await send_privately(pairing_reply(pairing.code)):
            return SENT_PRIVATELY
        await withdraw_pairing(self.store, pairing.code)
        told = self._told_to_write.get(str(user_id))
        if told is not None and moment - told < CODE_LIFETIME:
            return None
        self._told_to_write[str(user_id)] = moment
        return WRITE_DIRECTLY


SENT_PRIVATELY = (
    "I only talk to people my owner has approved; I have sent you a private message with how "
    "to be approved."
)
WRITE_DIRECTLY = (
    "I only talk to people my owner has approved. To be approved, write to me directly in a "
    "private chat: I will give you a code there."
)


def pairing_reply(code: str) -> str:
    return (
        "I only talk to people my owner has approved. To be approved, give my owner this code; "
        f"it works for one hour:\n\n{code}\n\n(they run: atlas pairing approve {code})"
    )


__all__ = [
    "Access",
    "Pairing",
    "approve_pairing",
    "deny_pairing",
    "is_paired",
    "list_pairings",
    "paired_users",
    "request_pairing",
    "withdraw_pairing",
]
