"""The internal "agents" channel: how one bot's message reaches another and the reply comes back.

`message_agent` (through HomeServices.message_bot, atlas/agents/services.py) submits the
message as an inbound on this channel, in the target bot's conversation with the sender
(Address(bot=target, channel="agents", chat=sender)). What the
Dispatcher then sends to that address (the reply, notes, or "Sorry, I could not answer…") is
collected, and when the target's conversation is idle again it goes back as one notice into
the conversation the message came from, through the notify callback kept per delivery.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from atlas.channels.base import Address
from atlas.dispatch import Dispatcher, Inbound
from atlas.providers.base import ToolCall
from atlas.tools.registry import Notifier

log = logging.getLogger(__name__)

AGENTS_CHANNEL = "agents"


@dataclass
class Delivery:
    id: str
    sender: str
    target: str
    address: Address
    notify: Notifier | None  # the origin conversation's; None: the reply is only logged
    replies: list[str] = field(default_factory=list)
    done: bool = False


class AgentChannel:
    """A Channel (atlas/channels/base.py) between the bots of one home."""

    name = AGENTS_CHANNEL
    streams = False

    def __init__(self, reply_seconds: float = 1800.0) -> None:
        self.reply_seconds = reply_seconds
        self._open: dict[Address, list[Delivery]] = {}
        # The origin of the latest delivery to each address: where a later reply goes (one
        # sent after the delivery was answered or timed out, e.g. after a subagent's notice).
        self._last: dict[Address, Delivery] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None: ...

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def typing(self, address: Address) -> None: ...

    async def stream(self, address: Address, text: str) -> None: ...

    async def show_tool_call(self, address: Address, call: ToolCall) -> None: ...

    async def ask(self, address: Address, question: str, choices: list[str]) -> str | None:
        return None  # no person on this channel: the gate denies what needs approval

    async def send(self, address: Address, text: str, files: list[Path] | None = None) -> None:
        waiting = self._open.get(address)
        if not waiting:
            last = self._last.get(address)
            if last is None:
                log.info("reply in %s with no delivery waiting for it: %.200s", address, text)
                return
            await self._notify([last], f"Later message from bot {last.target!r}:\n\n{text}")
            return
        for delivery in waiting:
            delivery.replies.append(text)

    async def deliver(
        self,
        dispatcher: Dispatcher,
        delivery: Delivery,
        text: str,
    ) -> None:
        """Start the target's turn; its reply (or failure) later reaches `delivery.notify`."""
        self._open.setdefault(delivery.address, []).append(delivery)
        self._last[delivery.address] = delivery
        try:
            await dispatcher.submit(
                Inbound(delivery.address, text, event_id=delivery.id, run_kind="bot")
            )
        except BaseException:
            self._close(delivery)
            raise
        task = asyncio.create_task(self._await_reply(dispatcher, delivery), name=delivery.id)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _close(self, delivery: Delivery) -> None:
        delivery.done = True
        waiting = self._open.get(delivery.address, [])
        if delivery in waiting:
            waiting.remove(delivery)
        if not waiting:
            self._open.pop(delivery.address, None)

    async def _await_reply(self, dispatcher: Dispatcher, delivery: Delivery) -> None:
        try:
            async with asyncio.timeout(self.reply_seconds):
                await dispatcher.wait_idle(delivery.address)
        except TimeoutError:
            if not delivery.done:
                self._close(delivery)
                await self._notify(
                    [delivery],
                    f"No reply from bot {delivery.target!r} to your message {delivery.id} "
                    f"within {self.reply_seconds:.0f} s; it may still be working, but its "
                    "answer will not reach you.",
                )
            return
        if delivery.done:
            return  # answered together with an earlier delivery to the same conversation
        # Everything open at this address was answered by the turns that just ended.
        answered = list(self._open.get(delivery.address, []))
        for item in answered:
            self._close(item)
        replies = delivery.replies or ["(it ended its turn without a reply)"]
        ids = ", ".join(d.id for d in answered)
        await self._notify(
            answered,
            f"Reply from bot {delivery.target!r} to your message {ids}:\n\n" + "\n\n".join(replies),
        )

    async def _notify(self, deliveries: list[Delivery], text: str) -> None:
        """One notice per origin conversation (deliveries from one origin share a callback)."""
        seen: list[Notifier] = []
        for delivery in deliveries:
            if delivery.notify is None:
                log.info("%s: nowhere to send the reply: %.200s", delivery.id, text)
                continue
            if any(delivery.notify is n for n in seen):
                continue
            seen.append(delivery.notify)
            try:
                await delivery.notify(text)
            except Exception:  # one origin gone must not lose the others' replies
                log.exception("could not bring the reply of %s back", delivery.id)
