"""A long approval on Telegram: a message holds at most 4,096 characters (the channel keeps a
question to QUESTION_LIMIT), and the question was simply cut there. Now a longer one is folded
(atlas/channels/long_question.py) and its whole text goes just before it, as a document."""

from __future__ import annotations

import logging
from typing import Any

from atlas.channels.long_question import FoldedQuestion
from atlas.channels.send_errors import SendError

log = logging.getLogger(__name__)


async def attach_whole(
    tg: Any, retrying: Any, chat_id: int, thread_id: int | None, folded: FoldedQuestion, where: str
) -> str:
    """Send the whole question as a document; the text to show, which says so if it failed.
    `tg` is the aiogram Bot, `retrying` the channel's retrying caller (telegram/delivery.py)."""
    from aiogram.types import BufferedInputFile

    assert folded.whole is not None
    document = BufferedInputFile(folded.whole.encode(), filename=folded.filename)
    try:
        await retrying.call(
            "sendDocument",
            lambda: tg.send_document(chat_id, document, message_thread_id=thread_id),
        )
    except SendError as exc:
        log.warning("%s: the whole approval could not be attached: %s", where, exc)
        return (
            f"{folded.shown}\n\n(The file with the whole of it could not be sent: {exc}. "
            "Deny unless you know what it is.)"
        )
    return folded.shown


__all__ = ["attach_whole"]
