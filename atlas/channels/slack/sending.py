"""What the Slack channel sends: an outbox row's reply rendered to mrkdwn and split (what fails
is raised, classified, for the outbox: atlas/outbox/), files uploaded into the same thread, and
the reaction that says a reply is being written."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.channels.chat_common import BackgroundTasks, platform_chat, sort_attached
from atlas.channels.send_errors import MAYBE_LOST, MaybeDelivered, RetryLater, SendError
from atlas.channels.slack.delivery import SlackSender, unsendable
from atlas.channels.slack.format import SLACK_TEXT_LIMIT, markdown_to_mrkdwn
from atlas.channels.slack.reactions import TYPING_REACTION, TypingMarks
from atlas.channels.telegram.text import split_message
from atlas.errors import AtlasError
from atlas.providers.base import ToolCall

if TYPE_CHECKING:
    from atlas.dispatch import Dispatcher

log = logging.getLogger(__name__)


def slack_channel(address: Address) -> str:
    """The Slack channel id of a conversation (its chat key without the `!new` generation)."""
    return platform_chat(address.chat)


class SlackSending:
    """The Web API calls going out. SlackChannel sets the state below."""

    name: str
    _sender: SlackSender | None
    _last_message: dict[Address, tuple[str, str]]  # where the typing mark goes
    _reacting: dict[Address, tuple[str, str]]
    dispatcher: Dispatcher
    _background: BackgroundTasks
    _marks: TypingMarks

    @property
    def sender(self) -> SlackSender:
        if self._sender is None:
            raise AtlasError(f"channel {self.name} is not started")
        return self._sender

    async def typing(self, address: Address) -> None:
        """A reaction on the message being answered; it stays until the reply is sent. Both
        are background work (slack/reactions.py): neither the turn nor the reply waits."""
        target = self._last_message.get(address)
        if target is None or address in self._reacting:
            return
        self._reacting[address] = target
        self._marks.mark(address, *target)

    async def _stop_typing(self, address: Address) -> None:
        target = self._reacting.pop(address, None)
        if target is not None:
            self._marks.unmark(address, *target)

    async def stream(self, address: Address, text: str) -> None:
        return None  # chat platforms get the whole reply at the end

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        return None

    async def send(
        self, address: Address, text: str, files: list[Path] | None = None
    ) -> str | None:
        """One outbox row: rendered, split and posted, each part exactly once (SlackSender),
        then its files uploaded into the same channel and thread; the `ts` of the first part.
        A thin adapter: what cannot go is raised for the outbox (atlas/outbox/sender.py):
        RetryLater (with `unsent`, the rest, once a part went), NeverRetry when Slack refuses,
        MaybeDelivered once the rest went when a part may have arrived but cannot be checked
        (not posted again). A file that cannot be sent is named in a reply of its own."""
        await self._stop_typing(address)
        sendable, refused = await sort_attached(files, unsendable, self.name)
        body = text if text.strip() else ("" if sendable and not refused else "(no answer)")
        if refused:
            body = "\n\n".join(part for part in (body, "\n".join(refused)) if part)
        pieces = split_message(body, SLACK_TEXT_LIMIT) if body else []
        first_ts: str | None = None
        unsure: MaybeDelivered | None = None  # a part that may not have arrived
        for number, piece in enumerate(pieces):
            try:
                ts = await self._post_piece(address, piece)
            except MaybeDelivered as exc:
                unsure = exc
                log.warning(
                    "%s: part %d of %d of a reply to %s may not have arrived; not posted again: %s",
                    self.name,
                    number + 1,
                    len(pieces),
                    address,
                    exc,
                )
                continue
            except RetryLater as exc:
                if number == 0:
                    raise
                rest = "\n\n".join(pieces[number:])
                if unsure is not None:
                    rest += f"\n\n{MAYBE_LOST}"
                raise RetryLater(
                    str(exc), after=exc.after, unsent=rest, unsent_files=tuple(sendable)
                ) from exc
            first_ts = first_ts or ts
        failed = await self._send_files(address, sendable)
        if failed:
            await self._send_failures(address, failed)
        if unsure is not None:
            raise unsure
        return first_ts

    async def _post_piece(self, address: Address, piece: str) -> str:
        """One piece of the reply's Markdown, rendered (split again in the rare case that its
        escapes carry it past the limit); the `ts` of its first post."""
        rendered = markdown_to_mrkdwn(piece)
        posts = [rendered]
        if len(rendered) > SLACK_TEXT_LIMIT:
            posts = split_message(rendered, SLACK_TEXT_LIMIT)
        first = ""
        for post in posts:
            ts = await self.sender.post(
                slack_channel(address), post, thread_ts=address.thread or None
            )
            first = first or ts
        return first

    async def _send_files(self, address: Address, files: list[Path]) -> list[str]:
        """Upload each file; a line for each that did not go."""
        failed = []
        for path in files:
            try:
                await self.sender.upload(
                    slack_channel(address), path, thread_ts=address.thread or None
                )
            except MaybeDelivered as exc:
                log.warning(
                    "%s: file %s may not have reached %s: %s", self.name, path, address, exc
                )
                failed.append(
                    f"(The connection broke while I was sending the file {path.name}, so it "
                    "may not have reached you. Ask again if it did not.)"
                )
            except (SendError, OSError) as exc:
                log.warning("%s: file %s not sent to %s: %s", self.name, path, address, exc)
                why = exc if isinstance(exc, SendError) else exc.strerror or exc
                failed.append(f"(I could not send the file {path.name}: {why})")
        return failed

    async def _send_failures(self, address: Address, lines: list[str]) -> None:
        """The files that did not go, named; should that fail for an outage, it is what the
        outbox keeps of the row (the reply itself went)."""
        note = "\n".join(lines)
        try:
            await self.sender.post(
                slack_channel(address), markdown_to_mrkdwn(note), thread_ts=address.thread or None
            )
        except RetryLater as exc:
            raise RetryLater(str(exc), after=exc.after, unsent=note) from exc
        except SendError as exc:  # refused, or it may have arrived: the reply went
            log.warning("%s: the note on files to %s: %s", self.name, address, exc)

    async def _send_quietly(self, address: Address, text: str) -> None:
        """A line of the channel's own (a command's reply, a file it could not take), sent
        through the outbox like every message."""
        await self.dispatcher.outbox.send(address, text, kind="note")

    async def _safe_call(self, method: str, **params: Any) -> None:
        """A call whose failure must not end what it decorates (a reaction, an edit)."""
        try:
            await self.sender.call(method, **params)
        except SendError as exc:
            log.warning("%s: %s", self.name, exc)


__all__ = ["TYPING_REACTION", "SlackSending", "slack_channel"]
