"""Usage by hour, with the hours that are over kept in memory: a message is stored at the
time it is written and never moves, so an hour's sums are final once it has passed, and the
Usage page reads only the current hour's rows again (docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from atlas.dashboard.conversation_reads import conversation_reads
from atlas.dashboard.queries import UsageRow
from atlas.store.conversations import ConversationStore


@dataclass
class _Kept:
    since: str  # the first hour kept, "YYYY-MM-DDTHH" (UTC)
    until: str  # every hour before this one is kept whole
    rows: list[UsageRow] = field(default_factory=list)


class UsageCache:
    """Per bot: the usage rows of the hours that are over, since the earliest hour asked."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}

    async def rows(
        self, bot: str, store: ConversationStore, since: datetime, now: datetime | None = None
    ) -> list[UsageRow]:
        """Usage rows per UTC hour from the hour holding `since` on."""
        first = since.astimezone(UTC).strftime("%Y-%m-%dT%H")
        current = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H")
        kept = self._kept.get(bot)
        if kept is None or first < kept.since:  # nothing kept from that far back: read it all
            kept = self._kept[bot] = _Kept(first, first)
        start = f"{kept.until}:00:00"  # sorts before any time stored in that hour
        fresh = await conversation_reads(store).usage_by_hour(start)
        kept.rows += [row for row in fresh if row.hour < current]
        kept.until = max(kept.until, current)
        return [row for row in kept.rows if row.hour >= first] + [
            row for row in fresh if row.hour >= current
        ]
