"""A long approval on Slack: a Block Kit section holds at most 3,000 characters, so a question
longer than that (rendered to mrkdwn, escapes and all) is folded (atlas/channels/long_question.py)
and its whole text is shared into the same thread as a file, just before the question."""

from __future__ import annotations

import logging
from pathlib import Path

from atlas.channels.long_question import FoldedQuestion, fold_question
from atlas.channels.send_errors import SendError
from atlas.channels.slack.delivery import SlackSender
from atlas.channels.slack.format import markdown_to_mrkdwn

log = logging.getLogger(__name__)

SECTION_CHARS = 3000  # Slack's limit for a section block's text
FIRST_TRY = 2900  # raw characters; fewer when escapes carry the rendered text past the limit


def fold_for_slack(question: str, filename: str) -> FoldedQuestion:
    """The question whole when its rendered text fits a section, else folded to fit."""
    limit = FIRST_TRY
    while True:
        folded = fold_question(question, limit, filename)
        if len(markdown_to_mrkdwn(folded.shown)) <= SECTION_CHARS - 300 or limit < 400:
            return folded
        limit = limit * 2 // 3


async def attach_whole(
    sender: SlackSender, channel: str, thread_ts: str | None, folded: FoldedQuestion, where: str
) -> str:
    """Share the whole question as a file; the text to show, which says so if it failed."""
    assert folded.whole is not None
    try:
        await sender.upload(
            channel, Path(folded.filename), thread_ts=thread_ts, data=folded.whole.encode()
        )
    except SendError as exc:
        log.warning("%s: the whole approval could not be attached: %s", where, exc)
        return (
            f"{folded.shown}\n\n(The file with the whole of it could not be sent: {exc}. "
            "Deny unless you know what it is.)"
        )
    return folded.shown


__all__ = ["SECTION_CHARS", "attach_whole", "fold_for_slack"]
