"""Questions on Telegram: an approval with one inline button per choice (`ask`), and
ask_user's question sets (`ask_questions`), each question a message with its own keyboard,
answered by a tap or, after Other…, by a written message."""

from __future__ import annotations

import asyncio
import html
import logging
import secrets as random_tokens
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from atlas.channels.access import Access
from atlas.channels.base import (
    Address,
    Answer,
    Question,
    QuestionOutcome,
    QuestionStatus,
    answered_elsewhere,
)
from atlas.channels.in_flight import InFlight
from atlas.channels.long_question import fold_question
from atlas.channels.questions import (
    CANCEL,
    CHOOSE,
    OTHER_TEXT,
    collect_answers,
    describe_answer,
    parse_action,
)
from atlas.channels.send_errors import SendError
from atlas.channels.telegram.delivery import Chunk, send_chunk
from atlas.channels.telegram.long_approvals import attach_whole
from atlas.channels.telegram.questions import (
    CALLBACK_KIND,
    TelegramQuestionSet,
    answered_html,
    awaiting_html,
    closed_html,
    keyboard,
    question_html,
    question_plain,
)
from atlas.channels.telegram.sending import TelegramSending, target

if TYPE_CHECKING:
    from aiogram.types import CallbackQuery, Message, User

log = logging.getLogger(__name__)

QUESTION_LIMIT = 3500
ASK_KIND = "ask"
CLOSED = "This question is already closed."
NOT_ALLOWED = "Only people this bot serves can answer."
NOT_A_CHOICE = "That is not one of the choices."
WRONG_CHAT = "This button counts only on the question in the chat where it was asked."
NOT_YOURS = "Only the person who asked, or the bot's owner, can answer this."
_NOTES: dict[QuestionStatus, str] = {
    "undelivered": "could not be delivered",
    "timed out": "no answer in time",
}


@dataclass
class PendingAsk:
    question: str
    choices: list[str]
    chat_id: int
    message_id: int
    future: asyncio.Future[str | None]
    user: str = ""  # in a group conversation of one person: theirs (Address.user)


def tapped_where(query: CallbackQuery) -> tuple[int, int] | None:
    """(chat id, message id) of the message whose button was tapped; None when Telegram gives
    none (a button of an inline-mode message): such a tap is never counted."""
    message = query.message
    if message is None:
        return None
    return message.chat.id, message.message_id


class TelegramAsking(TelegramSending):
    """Putting questions and taking the answers. TelegramChannel sets the state below."""

    access: Access
    _asks: dict[str, PendingAsk]
    _question_sets: dict[str, TelegramQuestionSet]
    # (chat id, user id) → (request id, question): who tapped Other and owes a written answer
    _awaiting_text: dict[tuple[int, int], tuple[str, int]]

    # ------------------------------------------------------------ approvals

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Put a question with one inline button per choice; the first allowed tap answers.
        None when it could not be delivered or the channel stops; cancellation (a timeout)
        edits the message to say nobody answered."""
        from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

        self._stop_typing(address)
        chat_id = target(address)[0]
        request_id = random_tokens.token_hex(6)
        buttons = InlineKeyboardMarkup(
            inline_keyboard=[
                [InlineKeyboardButton(text=choice[:60], callback_data=f"ask:{request_id}:{index}")]
                for index, choice in enumerate(choices)
            ]
        )
        # A long question is folded to fit, its whole text sent just before as a document.
        folded = fold_question(question, QUESTION_LIMIT - 300, f"approval-{request_id}.txt")
        shown = folded.shown
        if folded.whole is not None:
            thread_id = target(address)[1]
            tg = self._connected()
            shown = await attach_whole(tg, self.retrying, chat_id, thread_id, folded, self.name)
        shown = shown[:QUESTION_LIMIT]
        in_flight = InFlight[int]()
        try:
            # A cancel meanwhile lets the send finish: the question is then closed below.
            chunk = Chunk(html.escape(shown), shown)
            message_id = await in_flight.finish(self._send_question(address, chunk, buttons))
        except SendError as exc:
            log.warning("%s: could not put a question to %s: %s", self.name, address, exc)
            in_flight.raise_cancel()  # the wait was cancelled meanwhile: it still ends so
            return None
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        pending = PendingAsk(shown, choices, chat_id, message_id, future, address.user)
        self._asks[request_id] = pending
        try:
            in_flight.raise_cancel()  # cancelled while posting: closed as any cancelled wait
            answer = await future
        except asyncio.CancelledError as cancel:
            if self.tg is not None:
                elsewhere = answered_elsewhere(cancel)  # the dashboard answered first
                note = (
                    f"<b>{html.escape(elsewhere.note())}</b>"
                    if elsewhere
                    else "<i>no answer in time</i>"
                )
                closed = f"{html.escape(shown)}\n\n→ {note}"
                self._background.spawn(self._edit_text(chat_id, message_id, closed))
            raise
        finally:
            self._asks.pop(request_id, None)
        if answer is not None:
            await self.typing(address)  # the turn goes on
        return answer

    async def _send_question(self, address: Address, chunk: Chunk, reply_markup: Any) -> int:
        """Send a question with its keyboard; its message id. A row of its own in the outbox,
        marked by how the send went (not queued: the caller waits on this message)."""
        chat_id, thread_id = target(address)
        async with self.dispatcher.outbox.posting(address, chunk.plain) as posted:
            message_id = await send_chunk(
                self._connected(),
                self.retrying,
                chat_id,
                chunk,
                thread_id=thread_id,
                reply_markup=reply_markup,
            )
            posted.platform_id = str(message_id)
        return message_id

    async def _on_callback(self, query: CallbackQuery) -> None:
        """A button tap: an approval's choice, or one of ask_user's question buttons."""
        kind, _, rest = (query.data or "").partition(":")
        if kind == CALLBACK_KIND:
            await self._on_question_tap(query, rest)
            return
        request_id, _, index = rest.partition(":")
        pending = self._asks.get(request_id) if kind == ASK_KIND else None
        if pending is None or pending.future.done():
            await self._answer_callback(query.id, CLOSED)
            return
        if refusal := await self._refuse_tap(query, pending):
            await self._answer_callback(query.id, refusal)
            return
        if not index.isdigit() or int(index) >= len(pending.choices):
            await self._answer_callback(query.id, NOT_A_CHOICE)
            return
        choice = pending.choices[int(index)]
        pending.future.set_result(choice)
        who = query.from_user.full_name or str(query.from_user.id)
        await self._answer_callback(query.id, choice)
        answered = (
            f"{html.escape(pending.question)}\n\n→ <b>{html.escape(choice)}</b> "
            f"({html.escape(who)})"
        )
        await self._edit_text(pending.chat_id, pending.message_id, answered)

    async def _refuse_tap(self, query: CallbackQuery, pending: PendingAsk) -> str | None:
        """Why this tap may not answer the approval, or None. It must come from the question's
        own message in its own chat (a forwarded copy's buttons, or a tap carrying another
        chat's data, do not count), from an allowed person, and, in a group conversation kept
        per person, from that person or one of the bot's allowed users (its owners)."""
        if tapped_where(query) != (pending.chat_id, pending.message_id):
            log.warning(
                "%s: a tap on approval %r came from another chat or message; ignored",
                self.name,
                pending.question[:60],
            )
            return WRONG_CHAT
        user = str(query.from_user.id)
        if not await self.access.is_allowed(user):
            return NOT_ALLOWED
        if pending.user and user != pending.user and user not in self.access.allowed:
            return NOT_YOURS
        return None

    # ------------------------------------------------------------ ask_user's questions

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        """Each question as a message with its own keyboard; submitted once every question has
        an allowed person's answer. Undelivered when a question cannot be sent; a cancelled
        wait (a timeout) edits the open questions to say nobody answered."""
        self._stop_typing(address)
        chat_id = target(address)[0]
        asked = TelegramQuestionSet(random_tokens.token_hex(6), questions, chat_id)

        async def post(index: int) -> None:
            # A cancel meanwhile lets the send finish and record its message, so the cancel's
            # closing of the open questions (collect_answers) reaches it too.
            chunk = Chunk(question_html(asked, index), question_plain(asked, index))
            in_flight = InFlight[int]()
            try:
                sent = self._send_question(address, chunk, keyboard(asked, index))
                message_id = await in_flight.finish(sent)
            except SendError:
                in_flight.raise_cancel()
                raise
            asked.message_ids.append(message_id)
            in_flight.raise_cancel()

        async def close(index: int, status: QuestionStatus, detail: str) -> None:
            note = _NOTES.get(status) or detail or "cancelled"
            await self._edit_question(asked, index, closed_html(asked, index, note))

        try:
            outcome = await collect_answers(
                asked,
                self._question_sets,
                post=post,
                close=close,
                undeliverable=SendError,
                in_background=self._background.spawn,
                where=f"{self.name} to {address}",
            )
        finally:
            self._forget_awaiting(asked.request_id)
        if outcome.status == "submitted":
            await self.typing(address)  # the turn goes on
        return outcome

    async def _on_question_tap(self, query: CallbackQuery, key: str) -> None:
        action = parse_action(key)
        asked = self._question_sets.get(action.request_id) if action else None
        if action is None or asked is None or not asked.is_open(action.question):
            await self._answer_callback(query.id, CLOSED)
            return
        where = tapped_where(query)
        own_message = action.question < len(asked.message_ids) and where == (
            asked.chat_id,
            asked.message_ids[action.question],
        )
        if not own_message:
            await self._answer_callback(query.id, WRONG_CHAT)
            return
        if not await self.access.is_allowed(str(query.from_user.id)):
            await self._answer_callback(query.id, NOT_ALLOWED)
            return
        who = query.from_user.full_name or str(query.from_user.id)
        index = action.question
        if action.action == CANCEL:
            asked.cancel(f"cancelled by {who}")
            await self._answer_callback(query.id, "Cancelled.")
        elif action.action == OTHER_TEXT:
            self._awaiting_text[(asked.chat_id, query.from_user.id)] = (asked.request_id, index)
            await self._answer_callback(query.id, "Send your answer as a message.")
            await self._edit_question(
                asked, index, awaiting_html(asked, index, who), keyboard(asked, index)
            )
        elif action.action == CHOOSE:
            await self._on_choice(query, asked, index, action.choice, who)
        else:
            answer = asked.done(index, who)
            if answer is None:
                await self._answer_callback(query.id, "Tap a choice first, or Other….")
                return
            await self._answer_callback(query.id, describe_answer(answer)[:200])
            await self._show_answer(asked, index, answer)

    async def _on_choice(
        self, query: CallbackQuery, asked: TelegramQuestionSet, index: int, choice: int, who: str
    ) -> None:
        """A choice tapped: it answers a single-select question, or toggles in a multi-select."""
        if not asked.valid_choice(index, choice):
            await self._answer_callback(query.id, NOT_A_CHOICE)
            return
        if asked.questions[index].multi_select:
            asked.toggle(index, choice)
            await self._answer_callback(query.id, asked.questions[index].choices[choice])
            await self._edit_question(
                asked, index, question_html(asked, index), keyboard(asked, index)
            )
            return
        answer = asked.choose(index, choice, who)
        await self._answer_callback(query.id, describe_answer(answer)[:200])
        await self._show_answer(asked, index, answer)

    async def _answer_in_words(self, message: Message, user: User, words: str) -> bool:
        """A written answer to a question whose Other… this person tapped here; True if so."""
        waiting = self._awaiting_text.pop((message.chat.id, user.id), None)
        if waiting is None:
            return False
        request_id, index = waiting
        asked = self._question_sets.get(request_id)
        if asked is None or not asked.is_open(index) or not words:
            return False  # the question closed meanwhile: an ordinary message
        who = user.full_name or str(user.id)
        await self._show_answer(asked, index, asked.write(index, words, who))
        return True

    async def _show_answer(self, asked: TelegramQuestionSet, index: int, answer: Answer) -> None:
        self._forget_awaiting(asked.request_id, index)
        shown = answered_html(asked, index, describe_answer(answer), answer.by)
        await self._edit_question(asked, index, shown)

    async def _edit_question(
        self, asked: TelegramQuestionSet, index: int, text: str, reply_markup: Any = None
    ) -> None:
        if index < len(asked.message_ids):  # a tap can outrun the send's own bookkeeping
            await self._edit_text(asked.chat_id, asked.message_ids[index], text, reply_markup)

    def _forget_awaiting(self, request_id: str, index: int | None = None) -> None:
        for key, (waiting_for, question) in list(self._awaiting_text.items()):
            if waiting_for == request_id and index in (None, question):
                del self._awaiting_text[key]

    def pending_questions(self, chat_id: int) -> list[str]:
        """The questions still waiting for an answer in this chat (for /status)."""
        pending = [p.question for p in self._asks.values() if p.chat_id == chat_id]
        pending += [
            asked.questions[index].text
            for asked in self._question_sets.values()
            if asked.chat_id == chat_id
            for index in asked.open_questions()
        ]
        return pending


__all__ = ["QUESTION_LIMIT", "PendingAsk", "TelegramAsking"]
