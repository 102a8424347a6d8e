"""What the outbox says on its own: that a message may not have arrived, and that one kept
through an outage is late."""

from __future__ import annotations

from atlas.outbox.rows import TOLD_WHEN_UNSURE, OutboxRow

# An answer a restart caught while the platform had it.
RESTARTED_WHILE_SENDING = (
    "(Atlas restarted while sending its last answer, so it may not have reached you. "
    "Ask again if it did not.)"
)
# A routine's report a restart caught the same way (its key names the routine).
REPORT_KEY = "routine-run:"  # + run id + ":" + the routine's name: atlas/routines/runner.py
REPORT_CAUGHT_SENDING = (
    '(Routine "{name}" finished, but Atlas stopped while sending its report, so it may not '
    "have reached you. `atlas routines history {name}` has it.)"
)
# A message whose platform's answer was lost on the way (the connection broke after the
# request went out): part of it may be missing.
CONNECTION_BROKE = (
    "(The connection broke while I was sending that reply, so part of it may not have "
    "reached you. Ask again if something is missing.)"
)
# The key of the note about a row that may not have arrived: + the row's id (atlas/outbox/rows.py).
MAYBE_KEY = "maybe:"
# A part whose arrival is in doubt, sent once more (Telegram, which cannot check): the row's
# key is this + the first row's id, and its text starts with the label.
RESEND_KEY = "resend:"
RESENT_LABEL = "(Sent again: the connection broke while this went out, so it may appear twice.)"


def is_resend(row: OutboxRow) -> bool:
    """Whether the row is itself a part sent once more (never resent a second time)."""
    return row.key is not None and row.key.startswith(RESEND_KEY)


# Ahead of a message kept through an outage, when it finally goes out.
EARLIER_REPLY = "_(An earlier reply could not be delivered; here it is:)_"


def unsure_note(row: OutboxRow, *, restarted: bool) -> str | None:
    """The note a row that may not have arrived is followed by: for an answer, a report, or a
    notice that stands as a conversation's answer (a turn cut short, or such a note itself:
    the person is told until one surely went). None for rows nobody needs told about (a line
    about a turn, a routine's notice, a question: the turn's own recovery tells)."""
    if row.key is not None and row.key.startswith(MAYBE_KEY):
        return row.text  # a note that may not have arrived either: said again, as it was
    stands_as_answer = row.kind == "notice" and row.message_id is not None
    if row.kind not in TOLD_WHEN_UNSURE and not stands_as_answer:
        return None
    if not restarted:
        return CONNECTION_BROKE
    if row.kind == "report":
        name = row.key.split(":", 2)[2] if row.key and row.key.startswith(REPORT_KEY) else ""
        return REPORT_CAUGHT_SENDING.format(name=name or "NAME")
    return RESTARTED_WHILE_SENDING


def as_sent(row: OutboxRow) -> str:
    """The text a row goes out with: a kept answer or report says it is late (a line about
    a turn or a notice says what it is by itself)."""
    if row.state != "kept" or row.kind not in TOLD_WHEN_UNSURE or not row.text.strip():
        return row.text
    return f"{EARLIER_REPLY}\n\n{row.text}"


__all__ = [
    "CONNECTION_BROKE",
    "EARLIER_REPLY",
    "REPORT_KEY",
    "REPORT_CAUGHT_SENDING",
    "RESTARTED_WHILE_SENDING",
    "as_sent",
    "unsure_note",
]
