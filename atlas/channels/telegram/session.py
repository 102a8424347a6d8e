"""One aiogram HTTP session per Telegram API server and event loop, shared by the home's bots.

aiogram's session takes the bot on every call, so bots can share one (aiogram's own multibot
example does). Sharing saves what a session costs to make, mostly the TLS context aiogram
builds from certifi's bundle (36 ms each on the benchmark VM: a third of a second of start-up
with 10 bots). It also gives every bot the same pool of warm connections. The session closes
when the last bot using it lets go.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiogram.client.session.aiohttp import AiohttpSession


@dataclass
class _Shared:
    session: AiohttpSession
    users: int = 0


# Keyed by loop: an aiohttp session belongs to the loop it was made on (tests run many).
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Shared]] = (
    weakref.WeakKeyDictionary()
)


def shared_session(api_base: str | None) -> AiohttpSession:
    """The session for bots on `api_base` (None: Telegram's own servers). Every call must be
    matched by one `release_session`."""
    from aiogram.client.telegram import PRODUCTION, TelegramAPIServer

    from atlas.channels.telegram.errors import status_keeping_session

    sessions = _BY_LOOP.setdefault(asyncio.get_running_loop(), {})
    key = api_base or ""
    shared = sessions.get(key)
    if shared is None:
        api = TelegramAPIServer.from_base(api_base) if api_base else PRODUCTION
        # No cap on connections: each polling bot holds one for its long poll, so aiogram's
        # cap of 100 for one bot would stall the 101st bot; sends are bounded by the turns.
        shared = sessions[key] = _Shared(status_keeping_session(api=api, limit=0))
    shared.users += 1
    return shared.session


async def release_session(session: AiohttpSession) -> None:
    """One bot is done with `session`; the last one closes it."""
    sessions = _BY_LOOP.get(asyncio.get_running_loop(), {})
    for key, shared in list(sessions.items()):
        if shared.session is session:
            shared.users -= 1
            if shared.users > 0:
                return
            del sessions[key]
            break
    await session.close()


__all__ = ["release_session", "shared_session"]
