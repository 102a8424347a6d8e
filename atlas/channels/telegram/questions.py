"""How ask_user's questions look on Telegram: one message per question, an inline keyboard of
its choices (toggles and Done in multi-select), Other… and Cancel; and the message once closed.

Every button's callback data is `q:<request id>:<question>:<action>` (atlas/channels/questions.py),
well under Telegram's 64 bytes.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from atlas.channels.base import Question
from atlas.channels.questions import (
    CANCEL,
    CHOOSE,
    DONE,
    OTHER_TEXT,
    QuestionSet,
    action_key,
)

if TYPE_CHECKING:
    from aiogram.types import InlineKeyboardMarkup

CALLBACK_KIND = "q"
BUTTON_CHARS = 60


class TelegramQuestionSet(QuestionSet):
    """A QuestionSet that knows its chat and the message of each question."""

    def __init__(self, request_id: str, questions: list[Question], chat_id: int) -> None:
        super().__init__(request_id, questions)
        self.chat_id = chat_id
        self.message_ids: list[int] = []


def question_html(asked: QuestionSet, index: int, *, hint: bool = True) -> str:
    question = asked.questions[index]
    total = len(asked.questions)
    head = f"❓ <b>Question {index + 1} of {total}</b>\n" if total > 1 else "❓ "
    body = head + html.escape(question.text)
    if hint and question.multi_select:
        body += "\n<i>Tap every choice that applies, then Done.</i>"
    return body


def question_plain(asked: QuestionSet, index: int) -> str:
    """The same question without markup, for when Telegram rejects the HTML."""
    total = len(asked.questions)
    head = f"Question {index + 1} of {total}: " if total > 1 else ""
    return head + asked.questions[index].text


def awaiting_html(asked: QuestionSet, index: int, who: str) -> str:
    return (
        f"{question_html(asked, index)}\n\n✏️ <i>{html.escape(who)}: send your answer as a "
        "message.</i>"
    )


def answered_html(asked: QuestionSet, index: int, answer: str, who: str) -> str:
    return (
        f"{question_html(asked, index, hint=False)}\n\n→ <b>{html.escape(answer)}</b> "
        f"({html.escape(who)})"
    )


def closed_html(asked: QuestionSet, index: int, note: str) -> str:
    return f"{question_html(asked, index, hint=False)}\n\n→ <i>{html.escape(note)}</i>"


def keyboard(asked: QuestionSet, index: int) -> InlineKeyboardMarkup:
    """The question's buttons: one row per choice, then Done (multi-select), Other…, Cancel."""
    from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

    def button(label: str, action: str, choice: int | None = None) -> InlineKeyboardButton:
        data = f"{CALLBACK_KIND}:{action_key(asked.request_id, index, action, choice)}"
        return InlineKeyboardButton(text=label, callback_data=data)

    question = asked.questions[index]
    rows = []
    for number, choice in enumerate(question.choices):
        label = choice[:BUTTON_CHARS]
        if question.multi_select:
            label = ("☑ " if number in asked.selected[index] else "☐ ") + label
        rows.append([button(label, CHOOSE, number)])
    last = [button("Other…", OTHER_TEXT), button("Cancel", CANCEL)]
    if question.multi_select:
        last.insert(0, button("Done", DONE))
    rows.append(last)
    return InlineKeyboardMarkup(inline_keyboard=rows)


__all__ = [
    "CALLBACK_KIND",
    "TelegramQuestionSet",
    "answered_html",
    "awaiting_html",
    "closed_html",
    "keyboard",
    "question_html",
    "question_plain",
]
