"""What the Slack channel sends: replies rendered to mrkdwn and split (kept when undeliverable,
never sent twice when they may have arrived), files uploaded into the same thread, and the
reaction that says a reply is being written."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from atlas.channels.base import Address
from atlas.channels.chat_common import BackgroundTasks, platform_chat, sort_attached
from atlas.channels.markdown import RULE
from atlas.channels.send_errors import MAYBE_LOST, MaybeDelivered
from atlas.channels.slack_delivery import SlackDeliveryError, SlackSender, unsendable
from atlas.channels.slack_format import SLACK_TEXT_LIMIT, markdown_to_mrkdwn
from atlas.channels.text import split_message
from atlas.errors import AtlasError
from atlas.providers.base import ToolCall

log = logging.getLogger(__name__)

TYPING_REACTION = "eyes"
EARLIER_REPLY = "(An earlier reply could not be delivered; here it is.)"


def slack_channel(address: Address) -> str:
    """The Slack channel id of a conversation (its chat key without the `!new` generation)."""
    return platform_chat(address.chat)


class SlackSending:
    """The Web API calls going out. SlackChannel sets the state below."""

    name: str
    _sender: SlackSender | None
    _last_message: dict[Address, tuple[str, str]]  # where the typing mark goes
    _reacting: dict[Address, tuple[str, str]]
    # Rendered mrkdwn that could not be posted, sent ahead of the next reply that gets through.
    undelivered: dict[Address, list[str]]
    _background: BackgroundTasks

    @property
    def sender(self) -> SlackSender:
        if self._sender is None:
            raise AtlasError(f"channel {self.name} is not started")
        return self._sender

    async def typing(self, address: Address) -> None:
        """A reaction on the message being answered; it stays until the reply is sent."""
        target = self._last_message.get(address)
        if target is None or address in self._reacting:
            return
        self._reacting[address] = target
        channel, ts = target
        await self._safe_call("reactions.add", channel=channel, timestamp=ts, name=TYPING_REACTION)

    async def _stop_typing(self, address: Address) -> None:
        target = self._reacting.pop(address, None)
        if target is not None:
            channel, ts = target
            await self._safe_call(
                "reactions.remove", channel=channel, timestamp=ts, name=TYPING_REACTION
            )

    async def stream(self, address: Address, text: str) -> None:
        return None  # chat platforms get the whole reply at the end

    async def show_tool_call(self, address: Address, call: ToolCall) -> None:
        return None

    def holds_undelivered(self, address: Address) -> bool:
        """Whether a reply to this address is kept undelivered: the next send carries it."""
        return bool(self.undelivered.get(address))

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        """Render, split and post, each chunk exactly once, then upload its files into the same
        channel and thread. A reply that cannot be delivered is kept (and sent with the next
        reply that gets through, or alone when `text` is empty) and the error is raised; a file
        that cannot be sent is named in the reply with the reason. A part that may have arrived
        but cannot be checked (MaybeDelivered) is not posted again: the person is told."""
        await self._stop_typing(address)
        sendable, refused = await sort_attached(files, unsendable, self.name)
        kept_only = not text.strip() and not files and self.holds_undelivered(address)
        body = (
            text
            if text.strip() or kept_only
            else ("" if sendable and not refused else "(no answer)")
        )
        if refused:
            body = "\n\n".join(part for part in (body, "\n".join(refused)) if part)
        rendered = markdown_to_mrkdwn(body) if body else ""
        if self.undelivered.get(address):
            # Kept parts are mrkdwn already: they go ahead as they are, not rendered again.
            kept = "\n\n".join(self.undelivered.pop(address))
            after = (RULE, rendered) if rendered else ()
            rendered = "\n\n".join(part for part in (EARLIER_REPLY, kept, *after) if part)
        chunks = split_message(rendered, SLACK_TEXT_LIMIT) if rendered else []
        unsure = False  # a part may not have arrived
        for number, chunk in enumerate(chunks):
            try:
                await self.sender.post(
                    slack_channel(address), chunk, thread_ts=address.thread or None
                )
            except MaybeDelivered as exc:
                unsure = True
                log.warning(
                    "%s: part %d of %d of a reply to %s may not have arrived; not posted again: %s",
                    self.name,
                    number + 1,
                    len(chunks),
                    address,
                    exc,
                )
            except SlackDeliveryError as exc:
                kept_parts = "\n".join(chunks[number:])
                if unsure:
                    kept_parts += f"\n\n{MAYBE_LOST}"
                if sendable:
                    kept_parts += f"\n\n(Not sent with it: {', '.join(p.name for p in sendable)}.)"
                self.undelivered.setdefault(address, []).append(kept_parts)
                log.error(
                    "%s: reply to %s undelivered (%d of %d parts kept): %s",
                    self.name,
                    address,
                    len(chunks) - number,
                    len(chunks),
                    exc,
                )
                raise
        if unsure:
            await self._tell_maybe_lost(address)
        await self._send_files(address, sendable)

    async def _tell_maybe_lost(self, address: Address) -> None:
        """Say that part of the reply may be missing; if even that fails, it is kept."""
        try:
            await self.sender.post(
                slack_channel(address), MAYBE_LOST, thread_ts=address.thread or None
            )
        except MaybeDelivered as exc:
            log.warning("%s: the notice to %s may not have arrived: %s", self.name, address, exc)
        except SlackDeliveryError as exc:
            log.warning("%s: notice to %s kept undelivered: %s", self.name, address, exc)
            self.undelivered.setdefault(address, []).append(MAYBE_LOST)

    async def _send_files(self, address: Address, files: list[Path]) -> None:
        """Upload each file; those that fail are named in a reply of their own."""
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
            except (SlackDeliveryError, OSError) as exc:
                log.warning("%s: file %s not sent to %s: %s", self.name, path, address, exc)
                why = exc if isinstance(exc, SlackDeliveryError) else exc.strerror or exc
                failed.append(f"(I could not send the file {path.name}: {why})")
        if failed:
            await self.send(address, "\n".join(failed))

    async def _send_quietly(self, address: Address, text: str) -> None:
        try:
            await self.send(address, text)
        except AtlasError as exc:
            log.warning("%s: %s", self.name, exc)

    async def _safe_call(self, method: str, **params: Any) -> None:
        """A call whose failure must not end what it decorates (a reaction, an edit)."""
        try:
            await self.sender.call(method, **params)
        except SlackDeliveryError as exc:
            log.warning("%s: %s", self.name, exc)


__all__ = ["EARLIER_REPLY", "TYPING_REACTION", "SlackSending", "slack_channel"]
