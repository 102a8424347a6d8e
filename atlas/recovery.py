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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.providers.base import Message

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher
    from atlas.store.conversations import ConversationStore

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Unfinished:
    """A conversation whose last stored message is not a final answer."""

    conversation_id: int
    address: Address
    last_id: int  # its last message
    last_at: datetime  # when that was stored
    resumed_before: bool  # its latest user message is our own resume notice
    undelivered: str | None = None  # a final answer stored but never sent: sent now
    unanswered: bool = True  # a person's message is still owed an answer


@dataclass
class RecoveryReport:
    resent: list[Unfinished] = field(default_factory=list)
    resumed: list[Unfinished] = field(default_factory=list)
    told: list[Unfinished] = field(default_factory=list)
    skipped: list[tuple[Unfinished, str]] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.resent)} answers resent, {len(self.resumed)} resumed, "
            f"{len(self.told)} told, {len(self.skipped)} skipped"
        )


# The last message of each person-facing conversation of this bot, and its latest user message.
_LAST_MESSAGES = """
SELECT c.id, c.channel, c.chat, c.thread, c.user,
       m.id AS last_id, m.role, m.tool_calls, m.created_at, m.content,
       m.answers_upto, m.delivered_at,
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


async def find_unfinished(
    store: ConversationStore, bot: str, *, since: datetime
) -> list[Unfinished]:
    """Conversations of `bot` active since `since` whose last message is not a final answer."""

    def select(db: Any) -> list[dict[str, Any]]:
        return list(
            db.query(
                _LAST_MESSAGES, [bot, since.astimezone(UTC).isoformat(timespec="microseconds")]
            )
        )

    found = []
    for row in await store.db.call(select):
        final = _is_final_answer(row["role"], row["tool_calls"])
        unanswered = not final or _came_in_during_the_turn(row)
        undelivered = _undelivered(row)
        if not unanswered and undelivered is None:
            continue
        address = Address(bot, row["channel"], row["chat"], row["thread"], row["user"])
        found.append(
            Unfinished(
                conversation_id=row["id"],
                address=address,
                last_id=row["last_id"],
                last_at=datetime.fromisoformat(row["created_at"]),
                resumed_before=row["last_user"] == f"[notice] {RESUME_NOTICE}",
                undelivered=undelivered,
                unanswered=unanswered,
            )
        )
    return found


def _undelivered(row: dict[str, Any]) -> str | None:
    """The final answer's text when it was stored but never reached the platform. Answers from
    before delivery was tracked (no `answers_upto`) count as delivered."""
    final = _is_final_answer(row["role"], row["tool_calls"])
    if final and row["answers_upto"] is not None and row["delivered_at"] is None:
        return row["content"]
    return None


def _came_in_during_the_turn(row: dict[str, Any]) -> bool:
    """A person's message stored before the final answer but after its turn began: the lane
    would have answered it next, had the process lived."""
    upto, last_user = row["answers_upto"], row["last_user_id"]
    return upto is not None and last_user is not None and last_user > upto


async def _newer_message(store: ConversationStore, item: Unfinished) -> bool:
    """Has a message been stored in the conversation since it was found unfinished? Asked
    right before acting, on the store's one writer thread, so the window is one write."""

    def newest(db: Any) -> int:
        row = db.execute(
            "SELECT MAX(id) FROM messages WHERE conversation_id = ?", [item.conversation_id]
        ).fetchone()
        return int(row[0] or 0)

    return await store.db.call(newest) > item.last_id


async def resume_interrupted_turns(
    dispatcher: Dispatcher,
    *,
    started_at: datetime,
    now: datetime | None = None,
    resume_within: timedelta = RESUME_WITHIN,
    look_back: timedelta = LOOK_BACK,
) -> RecoveryReport:
    """Resume or report every unfinished turn of every bot. Call once at start, after the
    channels are registered in the dispatcher (their replies must find them). A conversation
    whose last message was stored after `started_at` (when this process began, before it
    stored anything) is live: a message came in since the restart and its own turn answers everything."""
    from atlas.dispatch import Inbound

    now = now or datetime.now(UTC)
    runtime = dispatcher.runtime
    report = RecoveryReport()
    for bot in runtime.home.bots.values():
        store = await runtime.store(bot)
        for item in await find_unfinished(store, bot.name, since=now - look_back):
            if item.last_at >= started_at:
                continue  # stored by this process: its lane is on it
            if item.address.channel not in dispatcher.channels:
                report.skipped.append((item, f"channel {item.address.channel} is not running"))
                continue
            if item.undelivered is not None:
                if await dispatcher.deliver(item.address, item.undelivered) is not None:
                    report.skipped.append((item, "could not send its stored answer"))
                    continue
                await store.mark_delivered(item.last_id)
                report.resent.append(item)
                if not item.unanswered:
                    continue
            if await _newer_message(store, item) or dispatcher.has_lane(item.address):
                # A message came in as the channels started: the turn it woke answers both. A
                # notice now would start a second turn answering the same message again.
                continue
            if now - item.last_at <= resume_within and not item.resumed_before:
                await dispatcher.submit(
                    Inbound(item.address, RESUME_NOTICE, kind="notice", run_kind="conversation")
                )
                report.resumed.append(item)
                continue
            # Stored first, as an answer owed: should this process die before sending it, the
            # next start sends it (once) instead of telling them again.
            told_id = await store.append(
                item.conversation_id, Message("assistant", TOLD), answers_upto=item.last_id
            )
            problem = await dispatcher.deliver(item.address, TOLD)
            if problem is not None:
                report.skipped.append((item, f"could not tell them yet: {problem}"))
                continue
            if told_id is not None:
                await store.mark_delivered(told_id)
            report.told.append(item)
    for item, why in report.skipped:
        log.warning("unfinished turn in %s not recovered: %s", item.address, why)
    if report.resent or report.resumed or report.told:
        log.info("turns cut short by the last stop: %s", report.summary())
    return report


__all__ = [
    "LOOK_BACK",
    "RESUME_NOTICE",
    "RESUME_WITHIN",
    "TOLD",
    "RecoveryReport",
    "Unfinished",
    "find_unfinished",
    "resume_interrupted_turns",
]
