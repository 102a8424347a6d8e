"""Questions on Slack: an approval with one button per choice (`ask`), and ask_user's question
sets (`ask_questions`), each question a message with Block Kit buttons, checkboxes and an Other
input; only allowed people's clicks count, and an answered question's message shows who
answered."""

from __future__ import annotations

import asyncio
import logging
import secrets as random_ids
from dataclasses import dataclass
from typing import Any

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
from atlas.channels.questions import (
    CANCEL,
    CHOOSE,
    DONE,
    OTHER_TEXT,
    SELECT,
    QuestionAction,
    collect_answers,
    describe_answer,
    parse_action,
)
from atlas.channels.send_errors import SendError
from atlas.channels.slack.approvals import attach_whole, fold_for_slack
from atlas.channels.slack.format import (
    answered_blocks,
    escape_mrkdwn,
    parse_ask_value,
    question_blocks,
)
from atlas.channels.slack.questions import (
    QUESTION_ACTION_PREFIX,
    SlackQuestionSet,
    ask_user_blocks,
    choice_numbers,
    question_heading,
    selection_in_state,
)
from atlas.channels.slack.sending import SlackSending, slack_channel

log = logging.getLogger(__name__)

NOT_ALLOWED = "Only people this bot's owner approved can answer its questions."
NO_ANSWER = "No answer in time"
NOT_YOURS = "Only the person who asked, or this bot's owner, can answer this question."
_NOTES: dict[QuestionStatus, str] = {
    "undelivered": "Could not be delivered",
    "timed out": NO_ANSWER,
}


@dataclass
class PendingAsk:
    """A question with buttons, waiting for an allowed person's click."""

    address: Address
    channel: str
    ts: str
    question: str
    choices: list[str]
    answer: asyncio.Future[str | None]


def clicked_where(body: dict[str, Any]) -> tuple[str, str]:
    """(channel id, message ts) of the message whose element was clicked; empty when Slack
    gives none. A click counts only where the question itself was posted."""
    container = body.get("container") or {}
    channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
    ts = str(container.get("message_ts") or (body.get("message") or {}).get("ts") or "")
    return channel, ts


def answered_by(answer: str, user: str) -> str:
    """The outcome line of an answered question: the answer in bold, and who gave it."""
    return f"*{answer}* — answered by <@{user}>"


class SlackAsking(SlackSending):
    """Putting questions and taking the clicks. SlackChannel sets the state below."""

    access: Access
    _asks: dict[str, PendingAsk]
    _question_sets: dict[str, SlackQuestionSet]

    # --- approvals ---------------------------------------------------------------------------

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        """Put the question with one button per choice; the first allowed click answers it.
        None when the question could not be delivered."""
        request_id = random_ids.token_hex(6)
        channel = slack_channel(address)
        folded = fold_for_slack(question, f"approval-{request_id}.txt")
        if folded.whole is not None:  # too long for one section: the whole of it as a file
            thread = address.thread or None
            question = await attach_whole(self.sender, channel, thread, folded, self.name)
        in_flight = InFlight[str]()
        try:
            # A cancel meanwhile lets the post finish: the question is then closed below.
            blocks = question_blocks(request_id, question, choices)
            ts = await in_flight.finish(self._post_question(address, question, blocks))
        except SendError as exc:
            log.error("%s: could not ask %r in %s: %s", self.name, question, address, exc)
            in_flight.raise_cancel()  # the wait was cancelled meanwhile: it still ends so
            return None
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        pending = PendingAsk(address, channel, ts, question, choices, future)
        self._asks[request_id] = pending
        outcome = f"_{NO_ANSWER}._"
        try:
            in_flight.raise_cancel()  # cancelled while posting: closed as any cancelled wait
            return await pending.answer
        except asyncio.CancelledError as cancel:
            if elsewhere := answered_elsewhere(cancel):  # the dashboard answered first
                outcome = f"*{escape_mrkdwn(elsewhere.note())}*"
            raise
        finally:
            self._asks.pop(request_id, None)
            # Cancelling the wait (a timeout, /stop) cancels the future too.
            if pending.answer.cancelled() or not pending.answer.done():
                pending.answer.cancel()
                self._background.spawn(self._close_question(pending, outcome))

    async def _post_question(
        self, address: Address, text: str, blocks: list[dict[str, Any]]
    ) -> str:
        """Post a question; its ts. A row of its own in the outbox, marked by how the post
        went (not queued: the caller waits on this message)."""
        async with self.dispatcher.outbox.posting(address, text) as posted:
            ts = await self.sender.post(
                slack_channel(address), text, thread_ts=address.thread or None, blocks=blocks
            )
            posted.platform_id = ts
        return ts

    async def _on_button(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A click on an approval's button (acknowledged already: slack/channel.py)."""
        parsed = parse_ask_value(str(action.get("value", "")))
        user = str((body.get("user") or {}).get("id", ""))
        if parsed is None:
            return
        request_id, index = parsed
        pending = self._asks.get(request_id)
        if pending is None or pending.answer.done():
            return  # answered or expired already; its message says so
        if clicked_where(body) != (pending.channel, pending.ts):
            log.warning(
                "%s: a click on %r came from another channel or message; ignored",
                self.name,
                pending.question[:60],
            )
            return
        if not await self._allowed_to_answer(user, pending.channel):
            return
        if pending.address.user and user not in (pending.address.user, *self.access.allowed):
            await self._safe_call(
                "chat.postEphemeral", channel=pending.channel, user=user, text=NOT_YOURS
            )
            return
        if not 0 <= index < len(pending.choices):
            return
        choice = pending.choices[index]
        pending.answer.set_result(choice)
        await self._close_question(pending, answered_by(choice, user))

    async def _close_question(self, pending: PendingAsk, outcome: str) -> None:
        await self._safe_call(
            "chat.update",
            channel=pending.channel,
            ts=pending.ts,
            text=f"{pending.question}\n{outcome}",
            blocks=answered_blocks(pending.question, outcome),
        )

    async def _allowed_to_answer(self, user: str, channel: str) -> bool:
        """Whether this person may answer; one who may not is told so, privately."""
        if await self.access.is_allowed(user):
            return True
        await self._safe_call("chat.postEphemeral", channel=channel, user=user, text=NOT_ALLOWED)
        return False

    # --- ask_user's questions ------------------------------------------------------------------

    async def ask_questions(self, address: Address, questions: list[Question]) -> QuestionOutcome:
        """Each question as a message with its own Block Kit elements; submitted once every
        question has an allowed person's answer. Undelivered when a question cannot be posted;
        a cancelled wait (a timeout) edits the open questions to say nobody answered."""
        channel = slack_channel(address)
        asked = SlackQuestionSet(random_ids.token_hex(6), questions, channel)

        async def post(index: int) -> None:
            # A cancel meanwhile lets the post finish and record its message, so the cancel's
            # closing of the open questions (collect_answers) reaches it too.
            in_flight = InFlight[str]()
            text, blocks = questions[index].text, ask_user_blocks(asked, index)
            try:
                ts = await in_flight.finish(self._post_question(address, text, blocks))
            except SendError:
                in_flight.raise_cancel()
                raise
            asked.message_ts.append(ts)
            in_flight.raise_cancel()

        async def close(index: int, status: QuestionStatus, detail: str) -> None:
            note = _NOTES.get(status) or detail or "Cancelled"
            await self._close_question_message(asked, index, f"_{escape_mrkdwn(note)}._")

        return await collect_answers(
            asked,
            self._question_sets,
            post=post,
            close=close,
            undeliverable=SendError,
            in_background=self._background.spawn,
            where=f"{self.name} to {address}",
        )

    async def _on_question_action(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A click, a tick or an Enter in a question's message; only allowed people count
        (acknowledged already: slack/channel.py)."""
        key = str(action.get("action_id", "")).removeprefix(f"{QUESTION_ACTION_PREFIX}:")
        parsed = parse_action(key)
        asked = self._question_sets.get(parsed.request_id) if parsed else None
        if parsed is None or asked is None or not asked.is_open(parsed.question):
            return  # answered or expired already; its message says so
        channel, ts = clicked_where(body)
        index = parsed.question
        if (
            channel != asked.channel
            or index >= len(asked.message_ts)
            or ts != asked.message_ts[index]
        ):
            log.warning(
                "%s: a click on a question came from another channel or message; ignored", self.name
            )
            return
        user = str((body.get("user") or {}).get("id", ""))
        if not await self._allowed_to_answer(user, asked.channel):
            return
        if parsed.action == CANCEL:
            asked.cancel(f"cancelled by {user}")
        elif parsed.action == SELECT:
            asked.selected[index] = choice_numbers(action.get("selected_options"), asked, index)
        else:
            answer = await self._answer(asked, parsed, user, body, action)
            if answer is not None:
                shown = answered_by(escape_mrkdwn(describe_answer(answer)), user)
                await self._close_question_message(asked, index, shown)

    async def _answer(
        self,
        asked: SlackQuestionSet,
        parsed: QuestionAction,
        user: str,
        body: dict[str, Any],
        action: dict[str, Any],
    ) -> Answer | None:
        """The answer a choice, an Other text or Done gives the question; None when it gives
        none (no text, nothing ticked: the person is told what is missing)."""
        index = parsed.question
        selection = selection_in_state(body, asked, index)
        if parsed.action == CHOOSE:
            if not asked.valid_choice(index, parsed.choice):
                return None
            return asked.choose(index, parsed.choice, user)
        if parsed.action == OTHER_TEXT:
            text = str(action.get("value") or "").strip()
            if not text:
                return None
            if selection is not None:
                asked.selected[index] = selection
            return asked.write(index, text, user)
        if parsed.action != DONE:
            return None
        answer = asked.done(index, user, selection)
        if answer is None:
            await self._safe_call(
                "chat.postEphemeral",
                channel=asked.channel,
                user=user,
                text="Tick at least one choice first, or type an answer under Other.",
            )
        return answer

    async def _close_question_message(
        self, asked: SlackQuestionSet, index: int, outcome: str
    ) -> None:
        if index >= len(asked.message_ts):
            return  # never posted
        heading = question_heading(asked, index)
        await self._safe_call(
            "chat.update",
            channel=asked.channel,
            ts=asked.message_ts[index],
            text=f"{asked.questions[index].text}\n{outcome}",
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": heading}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": outcome}]},
            ],
        )


__all__ = ["NOT_ALLOWED", "PendingAsk", "SlackAsking", "answered_by"]
