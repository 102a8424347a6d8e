"""Which process serves which bot.

Share 0 is the home's own process (`atlas run` itself): it also runs the home's shared duties
(scheduler, pairing, atlas.db, dashboard, the executor bridge), so it takes the main bot, the one
the person talks to most and whose chat the dashboard and the executors' prompts use, and the
other bots go round the shares starting at 1, which leaves share 0 no more bots than the others.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass

from atlas.channels.base import Address
from atlas.errors import ConfigError
from atlas.home import Home

log = logging.getLogger(__name__)

WORKERS_ENV = "ATLAS_WORKERS"  # overrides [daemon] workers (a service manager's core limit)


def worker_count(home: Home, *, cores: int | None = None) -> int:
    """$ATLAS_WORKERS, else `[daemon] workers`, else one per core; never more than there are
    bots, at least one."""
    wanted = _from_env() or home.settings.daemon.workers or cores or os.cpu_count() or 1
    if any(bot.settings.spread for bot in home.bots.values()):
        return max(1, wanted)  # a spread bot has work for every worker
    return max(1, min(wanted, len(home.bots)))


def one_process_on_postgres(home: Home, count: int, *, say: bool = True) -> int:
    """1 for a home whose store is PostgreSQL (`[store] url`), logged (with `say`) when more
    were wanted:
    worker processes reach atlas.db through the home's process (a pickle link, for SQLite),
    and a home on PostgreSQL runs in one process for now (docs/scaling.md). `count` otherwise."""
    if home.settings.store.url is None or count <= 1:
        return count
    if not say:
        return 1
    log.warning(
        "workers: 1, not %d: a home whose store is PostgreSQL runs in one process for now "
        "([daemon] workers, $%s and the cores are not used; docs/scaling.md)",
        count,
        WORKERS_ENV,
    )
    return 1


def _from_env() -> int | None:
    value = os.environ.get(WORKERS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 64:
        raise ConfigError(f"{WORKERS_ENV}={value!r}: give a number of worker processes, 1 to 64")
    return int(value)


@dataclass(frozen=True)
class Placement:
    """Each bot's share (the index of the process that runs its channels and, unless the bot
    is spread, all its conversations)."""

    shares: tuple[tuple[str, ...], ...]
    # Bots whose conversations go to the share their address hashes to (bot.toml `spread`).
    spread: frozenset[str] = frozenset()

    @classmethod
    def of(cls, home: Home, count: int) -> Placement:
        main = home.settings.main
        shares: list[list[str]] = [[main]] + [[] for _ in range(count - 1)]
        others = sorted(name for name in home.bots if name != main)
        for position, name in enumerate(others):
            shares[(position + 1) % count].append(name)
        spread = frozenset(n for n, b in home.bots.items() if b.settings.spread and count > 1)
        return cls(tuple(tuple(share) for share in shares), spread)

    @property
    def count(self) -> int:
        return len(self.shares)

    def owner(self, bot: str) -> int:
        """The share that runs the bot's channels."""
        for index, share in enumerate(self.shares):
            if bot in share:
                return index
        raise KeyError(bot)

    def share_for(self, address: Address) -> int:
        """The share that holds this conversation: its lane, turns and outbox rows. A spread
        bot's by a stable hash of the address (the same in every process and every start)."""
        if address.bot not in self.spread:
            return self.owner(address.bot)
        key = "\0".join((address.channel, address.chat, address.thread, address.user)).encode()
        return zlib.crc32(key) % self.count

    def served_by(self, share: int) -> frozenset[str]:
        """The bots whose conversations share `share` may hold."""
        return frozenset(self.shares[share]) | self.spread

    def to_json(self) -> str:
        return json.dumps({"shares": self.shares, "spread": sorted(self.spread)})

    @classmethod
    def from_json(cls, text: str) -> Placement:
        data = json.loads(text)
        return cls(tuple(tuple(s) for s in data["shares"]), frozenset(data["spread"]))
