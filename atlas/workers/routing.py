"""Reaching a bot served by another process: the ops that move work between workers.

Every process keeps one `Elsewhere`. The home's process (share 0) holds a link to each worker;
a worker holds one link, to the home's process, which passes on what is meant for another
worker (op "route"). Each op runs the same code in the owning process as it would in one
process: a message is stored and answered by the owner's dispatcher, a routine's run by the
owner's tool loop, a report by the owner's outbox.

  submit         an inbound message or notice for a conversation (the dashboard's chat, a
                 spread bot's messages from its channel's process)
  run_detached   a turn of its own (a routine's run), its outcome back
  outbox_*       a report or notice through the outbox of the conversation's process
  deliver        message_agent's delivery; the reply comes back by
  notify         ... into the conversation it came from, in the sender's process
  stop_turn      a stop of a conversation's running turn
  mode           the mode a conversation chose with /mode (Telegram's /status, in its channel's
                 process)
  channel        a call on a channel that lives in the process (forwarded_channel.py)

A conversation lives in `Placement.share_for(address)`'s process, a bot's channels and its
detached runs in `Placement.owner(bot)`'s. `Elsewhere.call` runs an op for this process here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.channels.base import Address
from atlas.errors import AtlasError
from atlas.tools.registry import Notifier
from atlas.workers.forwarded_channel import FORWARDED
from atlas.workers.link import Link
from atlas.workers.plan import Placement

if TYPE_CHECKING:
    from atlas.dispatch import Detached, Dispatcher, Inbound
    from atlas.outbox.rows import Kind
    from atlas.outbox.sender import Delivery

log = logging.getLogger(__name__)

HOME_SHARE = 0
OPS = (
    "submit",
    "run_detached",
    "outbox_enqueue",
    "outbox_wait",
    "deliver",
    "notify",
    "stop_turn",
    "mode",
    "channel",
)


class Elsewhere:
    """This process's view of the other processes' bots."""

    def __init__(
        self, placement: Placement, here: int, links: Callable[[int], Awaitable[Link]]
    ) -> None:
        self.placement = placement
        self.here = here
        self._links = links  # in the home's process: each worker's; in a worker: the home's
        self._dispatcher: Dispatcher | None = None
        self._ops: dict[str, Callable[..., Awaitable[Any]]] = {}
        self._served = asyncio.Event()  # ops that come before `serve` wait for it
        # message_agent's deliveries sent from here to another process: where replies go.
        self._notifiers: dict[str, Notifier] = {}

    def serve(self, dispatcher: Dispatcher) -> None:
        """Answer the ops for this process's bots with `dispatcher`."""
        self._dispatcher = dispatcher
        self._ops = {
            "submit": dispatcher.submit,
            "run_detached": self._run_detached_here,
            "outbox_enqueue": self._enqueue_here,
            "outbox_wait": dispatcher.outbox.wait,
            "deliver": self._deliver_here,
            "notify": self._notify_here,
            "stop_turn": self._stop_turn_here,
            "mode": self._mode_here,
            "channel": self._channel_here,
        }
        self._served.set()

    def handle_on(self, link: Link) -> None:
        """Answer `link`'s requests: ops for here, and (in the home's process) "route"."""
        for op in OPS:
            link.on(op, functools.partial(self._run_here, op))
        link.on("route", self._route)

    async def _run_here(self, op: str, *args: Any) -> Any:
        await self._served.wait()
        return await self._ops[op](*args)

    async def dispatcher(self) -> Dispatcher:
        """This process's dispatcher, once `serve` gave it: a worker starts (and may ask) before
        the home's dispatcher is made, so what it asks first waits for it."""
        await self._served.wait()
        return self._here()

    def is_local(self, bot: str) -> bool:
        """Whether this process runs the bot's channels."""
        return self.placement.owner(bot) == self.here

    def is_here(self, address: Address) -> bool:
        """Whether this process holds the conversation (its lane, turns, outbox rows)."""
        return self.placement.share_for(address) == self.here

    # ------------------------------------------------------------ asking the owner

    async def call(self, share: int, op: str, *args: Any) -> Any:
        """Run `op` where share `share` lives: here, over its link, or via the home's process."""
        if share == self.here:
            return await self._run_here(op, *args)
        if self.here == HOME_SHARE:
            return await (await self._links(share)).ask(op, *args)
        return await (await self._links(HOME_SHARE)).ask("route", share, op, args)

    async def _route(self, share: int, op: str, args: tuple[Any, ...]) -> Any:
        return await self.call(share, op, *args)

    async def submit(self, inbound: Inbound) -> bool:
        share = self.placement.share_for(inbound.address)
        result: bool = await self.call(share, "submit", inbound)
        return result

    async def run_detached(
        self,
        bot_name: str,
        prompt: str,
        *,
        run_kind: str,
        chat: str,
        time_limit: float | None = None,
    ) -> Detached:
        share = self.placement.owner(bot_name)
        detached: Detached = await self.call(
            share, "run_detached", bot_name, prompt, run_kind, chat, time_limit
        )
        return detached

    # enqueue, wait and send as the Outbox has them (the routine scheduler's outbox, for any
    # conversation of the home: the outbox of the process holding it sends).

    async def enqueue(
        self,
        address: Address,
        text: str,
        files: tuple[Path, ...] | list[Path] = (),
        *,
        kind: Kind,
        key: str | None = None,
    ) -> int:
        share = self.placement.share_for(address)
        args = (address, text, tuple(files), kind, key)
        row_id: int = await self.call(share, "outbox_enqueue", *args)
        return row_id

    async def wait(self, address: Address, row_id: int) -> Delivery:
        delivery: Delivery = await self.call(
            self.placement.share_for(address), "outbox_wait", address, row_id
        )
        return delivery

    async def send(
        self,
        address: Address,
        text: str,
        files: tuple[Path, ...] | list[Path] = (),
        *,
        kind: Kind,
        key: str | None = None,
    ) -> Delivery:
        row_id = await self.enqueue(address, text, files, kind=kind, key=key)
        return await self.wait(address, row_id)

    async def deliver(
        self, delivery_id: str, sender: str, target: str, text: str, notify: Notifier | None
    ) -> None:
        """message_agent to a bot of another process; its reply reaches `notify` here."""
        if notify is not None:
            self._notifiers[delivery_id] = notify
        share = self.placement.share_for(agents_address(target, sender))
        await self.call(share, "deliver", self.here, delivery_id, sender, target, text)

    async def stop_turn(self, address: Address) -> bool:
        stopped: bool = await self.call(self.placement.share_for(address), "stop_turn", address)
        return stopped

    async def conversation_mode(self, address: Address, conversation_id: int) -> str | None:
        share = self.placement.share_for(address)
        mode: str | None = await self.call(share, "mode", address, conversation_id)
        return mode

    # ------------------------------------------------------------ answering here

    def _here(self) -> Dispatcher:
        if self._dispatcher is None:
            raise AtlasError("this process serves no bots yet")
        return self._dispatcher

    async def _run_detached_here(
        self, bot_name: str, prompt: str, run_kind: Any, chat: str, time_limit: float | None
    ) -> Detached:
        return await self._here().run_detached(
            bot_name, prompt, run_kind=run_kind, chat=chat, time_limit=time_limit
        )

    async def _enqueue_here(
        self, address: Address, text: str, files: tuple[Path, ...], kind: Kind, key: str | None
    ) -> int:
        return await self._here().outbox.enqueue(address, text, files, kind=kind, key=key)

    async def _stop_turn_here(self, address: Address) -> bool:
        return self._here().stop_turn(address)

    async def _mode_here(self, address: Address, conversation_id: int) -> str | None:
        return self._here().conversation_mode(address, conversation_id)

    async def _deliver_here(
        self, origin: int, delivery_id: str, sender: str, target: str, text: str
    ) -> None:
        from atlas.agents.channel import AGENTS_CHANNEL, AgentChannel, Delivery

        dispatcher = self._here()
        channel = dispatcher.channels.get(AGENTS_CHANNEL)
        if not isinstance(channel, AgentChannel):
            raise AtlasError(f"the {AGENTS_CHANNEL!r} channel is not running in this process")

        async def notify(reply: str) -> None:
            await self.call(origin, "notify", delivery_id, reply)

        delivery = Delivery(
            id=delivery_id,
            sender=sender,
            target=target,
            address=agents_address(target, sender),
            notify=notify,
        )
        await channel.deliver(dispatcher, delivery, text)

    async def _channel_here(self, name: str, method: str, args: tuple[Any, ...]) -> Any:
        """A channel call forwarded from another process (forwarded_channel.py)."""
        channel = self._here().channels.get(name)
        if channel is None or method not in FORWARDED:
            raise AtlasError(f"no channel {name!r} with {method!r} in share {self.here}")
        return await getattr(channel, method)(*args)

    async def _notify_here(self, delivery_id: str, text: str) -> None:
        notify = self._notifiers.get(delivery_id)
        if notify is None:
            log.info("reply to %s, whose conversation is gone: %.200s", delivery_id, text)
            return
        await notify(text)


def agents_address(target: str, sender: str) -> Address:
    """The conversation a message_agent delivery goes to (atlas/agents/channel.py's)."""
    return Address(target, "agents", sender)


class RoutedRuns:
    """What the routine scheduler runs through (runner.RunsDetached), for every bot of the
    home: a bot of another process runs there."""

    def __init__(self, dispatcher: Dispatcher, elsewhere: Elsewhere) -> None:
        self._dispatcher = dispatcher
        self._elsewhere = elsewhere
        self.outbox = elsewhere

    async def run_detached(
        self,
        bot_name: str,
        prompt: str,
        *,
        run_kind: Any,
        chat: str,
        notify: Notifier | None = None,
        time_limit: float | None = None,
    ) -> Detached:
        if self._elsewhere.is_local(bot_name):
            return await self._dispatcher.run_detached(
                bot_name, prompt, run_kind=run_kind, chat=chat, notify=notify, time_limit=time_limit
            )
        if notify is not None:
            raise AtlasError("a run in another worker process cannot take a notify callback")
        return await self._elsewhere.run_detached(
            bot_name, prompt, run_kind=run_kind, chat=chat, time_limit=time_limit
        )
