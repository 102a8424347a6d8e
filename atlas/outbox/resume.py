"""At start: the rows the last process left unsettled go on, at most once.

- `pending` (stored, never handed to the platform) and `kept` (an outage kept it): queued,
  oldest first, ahead of anything new to the same address.
- `sending` (the process died while the platform had it): it may have arrived, and the
  platforms take no idempotency key, so it is never sent again. It becomes `maybe`, and in the
  same transaction a note telling the person so is queued (answers and routine reports): a crash
  from there on sends the note, once, not both.
- A question row (its wait died with the process) and rows older than `look_back` (nobody is
  waiting for a day-old reply any more) are settled without sending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from atlas.channels.base import Address
from atlas.outbox.notes import unsure_note
from atlas.outbox.rows import OutboxRow
from atlas.outbox.sender import Outbox

log = logging.getLogger(__name__)

LOOK_BACK = timedelta(hours=24)
STOPPED_WHILE_SENDING = "Atlas stopped while the platform had it"


@dataclass
class ResumeReport:
    queued: list[OutboxRow] = field(default_factory=list)  # pending and kept: sent now
    maybe: list[OutboxRow] = field(default_factory=list)  # caught while sending: not resent
    notes: list[OutboxRow] = field(default_factory=list)  # the notes about those, queued
    dropped: list[OutboxRow] = field(default_factory=list)  # too old, or questions

    def summary(self) -> str:
        return (
            f"{len(self.queued)} queued again, {len(self.maybe)} caught while sending "
            f"({len(self.notes)} told), {len(self.dropped)} settled unsent"
        )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


async def resume_outbox(
    outbox: Outbox,
    bots: Iterable[str],
    *,
    started_at: datetime,
    now: datetime | None = None,
    look_back: timedelta = LOOK_BACK,
    elsewhere: Collection[str] = (),
    mine: Callable[[Address], bool] | None = None,
) -> ResumeReport:
    """Settle or queue every row of `bots` left unsettled by an earlier process (made before
    `started_at`, the moment this one began: later rows are this process's own). Rows for
    the channels `elsewhere` (served by another process: the terminal's) are left alone, and so
    are rows `mine` says another worker process holds (a spread bot's other conversations)."""
    oldest = _iso((now or datetime.now(UTC)) - look_back)
    report = ResumeReport()
    rows_of = outbox.rows  # the outbox's engine: each bot's conversations.db by default
    for bot in bots:
        epoch = outbox.epoch_of(bot)
        for row in await rows_of.open_rows(bot, before=_iso(started_at)):
            if row.address.channel in elsewhere or (mine is not None and not mine(row.address)):
                continue
            if row.kind == "question" or row.created_at < oldest:
                why = "a question whose wait ended" if row.kind == "question" else "too old"
                await rows_of.failed(bot, row.id, f"{why} at a restart: not sent", epoch=epoch)
                report.dropped.append(row)
            elif row.state == "sending":
                # One transaction: the row `maybe` and the note about it queued once.
                note = await rows_of.maybe(
                    row, STOPPED_WHILE_SENDING, unsure_note(row, restarted=True), epoch=epoch
                )
                report.maybe.append(row)
                if note is not None:
                    report.notes.append(note)
            else:
                report.queued.append(row)
    # Queued after every bot is read, oldest first per address: kept ahead of new.
    outbox.queue(report.notes + report.queued)
    if report.queued or report.maybe or report.dropped:
        log.info("outbox at start: %s", report.summary())
    return report


__all__ = ["LOOK_BACK", "ResumeReport", "resume_outbox"]
