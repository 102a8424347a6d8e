"""An approval whose question is too long for one chat message (a 4,000-character `rm` of 100
files): the whole of it goes as a file, and the message shows its start and end, folded, with
its length. The gate used to cut a command to its first 300 characters, so a person approved
7 of 100 files unseen; now the question carries the whole command and each channel shows all
of it this way (Slack: 3,000 characters per Block Kit section; Telegram: 4,096 per message).
"""

from __future__ import annotations

from dataclasses import dataclass

from atlas.channels.safe_cut import safe_cut

TAIL_SHARE = 0.25  # of the room for the question's text, what its end gets
FOLD_MARK = "\n[…]\n"
SLACK_ROOM = 16  # characters kept free: a cut moved back to a safe point lengthens the end


def describe_length(text: str) -> str:
    """`4,012 characters, 52 lines`."""
    lines = text.count("\n") + 1
    return f"{len(text):,} characters, {lines:,} line{'s' if lines != 1 else ''}"


@dataclass(frozen=True)
class FoldedQuestion:
    shown: str  # what the message says (the whole question when it fits)
    whole: str | None  # the whole question, to attach as a file; None when it fits
    filename: str = "approval.txt"


def _cut_back(text: str, end: int) -> int:
    """`end` moved back to a line end or a space when one is near (else a safe point)."""
    floor = int(end * 0.7)
    for boundary in ("\n", " "):
        at = text.rfind(boundary, floor, end)
        if at > 0:
            return at
    return safe_cut(text, end, 1)


def _cut_forward(text: str, start: int) -> int:
    """`start` moved on to just after a line end or a space when one is near."""
    ceiling = start + (len(text) - start) // 3
    for boundary in ("\n", " "):
        at = text.find(boundary, start, ceiling)
        if at != -1:
            return at + 1
    return safe_cut(text, start, 1)  # a little back, never inside a character's sequence


def fold_question(question: str, limit: int, filename: str = "approval.txt") -> FoldedQuestion:
    """The question as it fits in `limit` characters: whole, or its start and end around a
    fold mark, after a line saying how long it is and that the whole of it is in `filename`."""
    if len(question) <= limit:
        return FoldedQuestion(question, None, filename)
    note = (
        f"This approval is long ({describe_length(question)}): the whole of it is in the "
        f"file {filename}, sent with it. Its start and end:\n\n"
    )
    room = max(limit - len(note) - len(FOLD_MARK) - SLACK_ROOM, 2)
    tail_room = int(room * TAIL_SHARE)
    head_end = _cut_back(question, room - tail_room)
    tail_start = _cut_forward(question, len(question) - tail_room)
    shown = note + question[:head_end] + FOLD_MARK + question[tail_start:]
    return FoldedQuestion(shown, question, filename)


__all__ = ["FOLD_MARK", "FoldedQuestion", "describe_length", "fold_question"]
