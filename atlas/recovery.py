"""At start: turns that a crash or a stop cut short are finished, or the person is told.

The dispatcher stores every inbound message before its turn starts, so after a crash the store
knows which conversations were waiting for an answer: those whose last stored message is not a
final answer (the person's message or a notice with nothing after it, or a tool round with no
answer after it). A platform does not redeliver such a message (its event id is stored, so it
would be dropped as a duplicate), so without this nobody would ever answer it.

Recent ones (the daemon came back quickly: a crash, a deploy) are resumed: a notice is submitted
into the conversation and its lane runs a turn that answers from the stored history. Older ones,
and ones already resumed once without finishing (a message that crashes the daemon must not crash
it at every start), get a short message saying the answer was cut off; that message is stored as
the assistant's, so it is said once. Conversations idle for longer than `look_back` are left alone.
Terminal (`atlas chat`) turns cannot be resumed or told: their chat has ended. One older than
`resume_within` is settled quietly with a note stored as its answer (shown if the chat is taken
up again with `--chat`); a recent one is left to the chat that may still be running it.

Final answers are delivered at most once: each is stored with its outbox row, and the outbox's
own resume (atlas/outbox/resume.py) sends what was never sent and tells the person once about
what a crash caught while the platform had it. This module only decides about turns.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.outbox.notes import RESTARTED_WHILE_SENDING
from atlas.outbox.resume import ResumeReport, resume_outbox
from atlas.outbox.rows import Outgoing
from atlas.providers.base import Message

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher
    from atlas.store.conversations import ConversationStore

log = logging.getLogger(__name__)

CONSOLE = "console"  # `atlas chat`'s channel: another process serves it
# Channels only another process serves (`atlas chat`, `atlas routines run`): their outbox rows
# are theirs, never resumed here.
ELSEWHERE = (CONSOLE, "terminal")

RESUME_WITHIN = timedelta(minutes=10)
LOOK_BACK = timedelta(hours=24)
RESUME_NOTICE = (
    "Atlas restarted before it finished answering. Answer the person's latest message now; "
    "a tool call marked interrupted did not finish and may need to be made again."
)
TOLD = (
    "(Atlas restarted while working on your last message and did not finish it. "
    "Send it again if you still want an answer.)"
)
# Stored (never sent) as the answer of a terminal turn left unfinished: `atlas chat` has ended,
# nobody is there to tell, and `atlas chat --chat NAME` shows it when the chat is resumed.
CONSOLE_UNANSWERED = "(This message was not answered: the terminal chat ended first.)"
MAYBE_LOST = RESTARTED_WHILE_SENDING  # said by the outbox's resume


@dataclass(frozen=True)
class Unfinished:
    """A conversation whose last stored message is not a final answer."""

    conversation_id: int
    address: Address
    last_id: int  # its last message
    last_at: datetime  # when that was stored
    resumed_before: bool  # its latest user message is our own resume notice


@dataclass
class RecoveryReport:
    outbox: ResumeReport = field(default_factory=ResumeReport)  # messages left going out
    resumed: list[Unfinished] = field(default_factory=list)
    told: list[Unfinished] = field(default_factory=list)
    skipped: list[tuple[Unfinished, str]] = field(default_factory=list)
    # Terminal turns settled without a word: the `atlas chat` that ran them has ended.
    settled_console: list[Unfinished] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"outbox: {self.outbox.summary()}; turns: {len(self.resumed)} resumed, "
            f"{len(self.told)} told, {len(self.skipped)} skipped"
        )


# The last message of each person-facing conversation of this bot, and its latest user message.
_LAST_MESSAGES = """
SELECT c.id, c.channel, c.chat, c.thread, c.user,
       m.id AS last_id, m.role, m.tool_calls, m.created_at, m.content,
       m.answers_upto,
       (SELECT MAX(u.id) FROM messages u
         WHERE u.conversation_id = c.id AND u.role = 'user') AS last_user_id,
       (SELECT u.content FROM messages u
         WHERE u.conversation_id = c.id AND u.role = 'user'
         ORDER BY u.id DESC LIMIT 1) AS last_user
FROM conversations c
JOIN messages m ON m.id = (SELECT MAX(id) FROM messages WHERE conversation_id = c.id)
WHERE c.kind = 'conversation' AND c.bot = ? AND c.updated_at >= ?
"""


def _is_final_answer(role: str, tool_calls: str | None) -> bool:
    return role == "assistant" and tool_calls in (None, "", "[]")


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


async def find_unfinished(
    store: ConversationStore, bot: str, *, since: datetime
) -> list[Unfinished]:
    """Conversations of `bot` active since `since` whose last message is not a final answer,
    or is one whose turn had not seen every message before it."""
    from atlas.store.conversations import ConversationStore as SqliteStore  # loaded already

    if isinstance(store, SqliteStore):
        rows = await store.db.call(lambda db: list(db.query(_LAST_MESSAGES, [bot, _iso(since)])))
    else:  # the home's PostgreSQL database (atlas/store/pg/conversations.py): the same rows
        rows = await store.last_messages(_iso(since))  # type: ignore[attr-defined]
    found = []
    for row in rows:
        final = _is_final_answer(row["role"], row["tool_calls"])
        if final and not _came_in_during_the_turn(row):
            continue
        found.append(
            Unfinished(
                conversation_id=row["id"],
                address=Address(bot, row["channel"], row["chat"], row["thread"], row["user"]),
                last_id=row["last_id"],
                last_at=datetime.fromisoformat(row["created_at"]),
                resumed_before=row["last_user"] == f"[notice] {RESUME_NOTICE}",
            )
        )
    return found


def _came_in_during_the_turn(row: dict[str, Any]) -> bool:
    """A person's message stored before the final answer but after its turn began: the lane
    would have answered it next, had the process lived."""
    upto, last_user = row["answers_upto"], row["last_user_id"]
    return upto is not None and last_user is not None and last_user > upto


async def resume_interrupted_turns(
    dispatcher: Dispatcher,
    *,
    started_at: datetime,
    now: datetime | None = None,
    resume_within: timedelta = RESUME_WITHIN,
    look_back: timedelta = LOOK_BACK,
    bots: Collection[str] | None = None,
) -> RecoveryReport:
    """Resume or report every unfinished turn of every bot (of `bots`: a node recovers a bot
    whose lease it has just gained, `started_at` the moment it gained it, before its
    channels started). Call once at start, after the
    channels are registered in the dispatcher (their replies must find them). A conversation
    whose last message was stored after `started_at` (when this process began, before it
    stored anything) is live: a message came in since the restart and its own turn answers everything."""
    from atlas.dispatch import Inbound

    now = now or datetime.now(UTC)
    runtime = dispatcher.runtime
    report = RecoveryReport()
    found: list[tuple[ConversationStore, list[Unfinished]]] = []
    served = runtime.home.served if bots is None else frozenset(bots)
    for bot in runtime.home.served_bots():
        if bots is not None and bot.name not in served:
            continue
        store = await runtime.store(bot)
        # Found before the outbox resumes, which may store a note after an answer.
        found.append((store, await find_unfinished(store, bot.name, since=now - look_back)))
    # What the last process left going out, sent or settled first: ahead of anything new.
    report.outbox = await resume_outbox(
        dispatcher.outbox,
        served,
        started_at=started_at,
        now=now,
        look_back=look_back,
        elsewhere=ELSEWHERE,
        mine=dispatcher.elsewhere.is_here if dispatcher.elsewhere is not None else None,
    )
    elsewhere = dispatcher.elsewhere
    for store, unfinished in found:
        for item in unfinished:
            if item.last_at >= started_at:
                continue  # stored by this process: its lane is on it
            if elsewhere is not None and not elsewhere.is_here(item.address):
                continue  # a spread bot's conversation held by another worker process
            if item.address.channel not in dispatcher.channels:
                if item.address.channel == CONSOLE:
                    await _settle_console_turn(store, item, report, now, resume_within)
                    continue
                report.skipped.append((item, f"channel {item.address.channel} is not running"))
                continue
            if dispatcher.has_lane(item.address):
                # A message came in as the channels started: the turn it woke answers both. A
                # notice now would start a second turn answering the same message again.
                continue
            if now - item.last_at <= resume_within and not item.resumed_before:
                notice = Inbound(
                    item.address,
                    RESUME_NOTICE,
                    kind="notice",
                    run_kind="conversation",
                    unless_newer_than=item.last_id,  # the same race, closed in the store
                )
                if await dispatcher.submit(notice):
                    report.resumed.append(item)
                continue
            problem = await _tell(
                dispatcher, store, item.conversation_id, item.address, TOLD, upto=item.last_id
            )
            if problem is not None:
                report.skipped.append((item, f"could not tell them yet: {problem}"))
                continue
            report.told.append(item)
    for item, why in report.skipped:
        log.warning("unfinished turn in %s not recovered: %s", item.address, why)
    if report.resumed or report.told:
        log.info("turns cut short by the last stop: %s", report.summary())
    return report


async def _settle_console_turn(
    store: ConversationStore,
    item: Unfinished,
    report: RecoveryReport,
    now: datetime,
    recent: timedelta,
) -> None:
    """A terminal turn (a failed or interrupted `atlas chat` turn) cannot be resumed: its chat
    has ended. A note stored as its answer (never sent: no outbox row) settles it once. A recent one is
    left alone (an `atlas chat` may still be running it), without a warning."""
    if now - item.last_at <= recent:
        log.debug("terminal turn in %s left to its chat (recent)", item.address)
        return
    await store.append(
        item.conversation_id, Message("assistant", CONSOLE_UNANSWERED), answers_upto=item.last_id
    )
    report.settled_console.append(item)


async def _tell(
    dispatcher: Dispatcher,
    store: ConversationStore,
    conversation_id: int,
    address: Address,
    note: str,
    *,
    upto: int,
) -> str | None:
    """Store a note as the conversation's answer, with its outbox row in the same transaction,
    then send it: should this process die in between, the next start sends it (once) instead
    of telling them again. None when sent, else why not (the outbox keeps it)."""
    outgoing = Outgoing(address, note, kind="notice")
    await store.append(
        conversation_id, Message("assistant", note), answers_upto=upto, also=outgoing
    )
    [sent] = await dispatcher.outbox.deliver(outgoing.rows)
    return None if sent.state == "delivered" else f"{sent.state}: {sent.error}"


__all__ = [
    "CONSOLE_UNANSWERED",
    "LOOK_BACK",
    "MAYBE_LOST",
    "RESUME_NOTICE",
    "RESUME_WITHIN",
    "TOLD",
    "RecoveryReport",
    "Unfinished",
    "find_unfinished",
    "resume_interrupted_turns",
]
