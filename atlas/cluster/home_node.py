"""`atlas run --node NAME`: a home's bots served by whichever node holds each bot's lease.

The daemon starts with no bot of its own. A `ClusterNode` (atlas/cluster/node.py) takes this
node's fair share of the home's bots; for each bot gained, with its lease epoch:

- its channels start (the Telegram poller, the Slack socket) and are registered in the
  dispatcher, then its recovery runs as at a restart, with the moment of the gain as the
  start: messages stored but not answered are answered (or the person told), its outbox rows
  left unsent are resumed;
- the outbox claims its rows with the lease's epoch, and every claim and mark also checks the
  lease in its own transaction (`PgOutboxRows.lease_fence`): a node whose lease ended sends
  nothing more, even before the next owner claims a row;
- a turn stores its answer only while the lease is still held (`Dispatcher.holds`).

For each bot lost: `fence` answers None at once (the sends stop), then its routine runs on
this node (`BotTasks`: their turns, their sandboxed commands) are cancelled, each recorded
failed with the lost lease as why (its target told by the next holder), then its channels
stop, its lanes (their turns, the sandboxed commands they run) are cancelled without a word
and its outbox queues dropped; the rows stay in the database for the next owner.

The `scheduler` lease: the routine scheduler runs only while this node holds it (started on
gain, stopped on loss). A fire is keyed per (routine, slot) (`AlreadyFired`), so a handover
never runs one twice; what was due during the handover is caught up by the catch-up rule.
A fired run runs on its bot's holder (`NodeRuns.hand_run`): on this node's own run path
(`run_here`) when the bot is held here, else handed over (`ROUTINE_RUN`): its pre-check,
turn, sandboxed commands and report on the holder.

Between nodes (`node_messages`, LISTEN/NOTIFY; atlas/cluster/messages.py), each taken by the
bot's holder: a message for a bot held elsewhere (the dashboard's chat, whose sending node then
shows the holder's sent rows live, and the reply as it is written meanwhile: `live`,
atlas/cluster/live_chat.py; a notice; /stop), `message_agent` and its reply, a routine's run, a
routine's report for a bot held elsewhere (an outbox row its holder sends), and the answer to a
question (an approval, a question set, a subagent's) given on another node's dashboard
(atlas/cluster/asks.py).

Gains and losses are handled in a task per bot, in order, so a slow channel start never holds
back the node's heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.cluster.asks import ASK_ANSWER, SharedAsks
from atlas.cluster.bot_tasks import BotTasks
from atlas.cluster.live_chat import LIVE_CHANNEL, LiveChatRelay
from atlas.cluster.messages import Inbox, NodeMessage, NodeMessages
from atlas.cluster.node import ClusterNode, ClusterTiming
from atlas.errors import AtlasError
from atlas.outbox.engine import StaleEpoch

if TYPE_CHECKING:
    import asyncpg

    from atlas.channels.base import Address, Channel
    from atlas.channels.manager import RunningChannels
    from atlas.cluster.leases import Fence
    from atlas.dispatch import Detached, Dispatcher, Inbound
    from atlas.home import Home
    from atlas.outbox.rows import Kind
    from atlas.outbox.sender import Delivery
    from atlas.routines.engine import RoutineEngine
    from atlas.routines.scheduler import RoutineScheduler
    from atlas.routines.store import Routine
    from atlas.store.pg.server import PgServer
    from atlas.tools.registry import Notifier, RunKind, ToolResult

log = logging.getLogger(__name__)

# Node messages (kinds), each addressed to a bot and taken by the node holding it:
OUTBOX_ROW = "outbox_row"  # send this outbox row (written by another node)
INBOUND = "inbound"  # store this message and answer it (the dashboard's chat, a notice)
AGENT_MESSAGE = "agent_message"  # message_agent from a bot on another node
AGENT_REPLY = "agent_reply"  # the reply to a message_agent, back to the asking bot's node
STOP_TURN = "stop_turn"  # /stop for a turn running on the bot's node
ROUTINE_RUN = "routine_run"  # run this routine's fired run here (the scheduler is elsewhere)

HANDED_WAIT = 30.0  # seconds a routine's report handed to another node is followed
WEB_FOLLOW = 300.0  # seconds the dashboard follows a chat answered on another node
WEB_POLL = 0.3  # seconds between its reads of the holder's sent rows


def inbound_body(inbound: Inbound) -> dict[str, Any]:
    address = inbound.address
    return {
        "address": [address.bot, address.channel, address.chat, address.thread, address.user],
        "text": inbound.text,
        "event_id": inbound.event_id,
        "kind": inbound.kind,
        "files": [str(path) for path in inbound.files],
        "run_kind": inbound.run_kind,
        "unless_newer_than": inbound.unless_newer_than,
    }


def inbound_from(body: dict[str, Any]) -> Inbound:
    from atlas.channels.base import Address
    from atlas.dispatch import Inbound

    return Inbound(
        Address(*body["address"]),
        body["text"],
        event_id=body["event_id"],
        kind=body["kind"],
        files=tuple(Path(path) for path in body["files"]),
        run_kind=body["run_kind"],
        unless_newer_than=body["unless_newer_than"],
    )


class HomeNode:
    """One node of a home on PostgreSQL; see the module docstring."""

    def __init__(
        self,
        home: Home,
        server: PgServer,
        name: str,
        dispatcher: Dispatcher,
        running: RunningChannels,
        *,
        make_scheduler: Callable[[], RoutineScheduler],
        on_scheduler_change: Callable[[RoutineScheduler | None], None] | None = None,
        routine_store: RoutineEngine | None = None,
    ) -> None:
        """`routine_store`: the home's routines and runs, for the runs handed to this node
        (`ROUTINE_RUN`); by default the dispatcher's engines'."""
        from atlas.store.pg.outbox import PgOutboxRows

        self.home = home
        self.server = server
        self.name = name
        self.dispatcher = dispatcher
        self.running = running
        self.make_scheduler = make_scheduler
        self.on_scheduler_change = on_scheduler_change
        self.routine_store = routine_store
        # Told when this node's channels change (a bot gained or lost): `atlas doctor`'s file.
        self.channels_changed: Callable[[], None] | None = None
        settings = home.settings.cluster
        self.cluster = ClusterNode(
            server,
            name,
            sorted(home.bots),
            ClusterTiming(settings.lease_seconds, settings.heartbeat_seconds),
            on_gained=self._gained,
            on_lost=self._lost,
            on_scheduler=self._scheduler,
        )
        self.messages = NodeMessages(server, name)
        self.inbox = Inbox(
            self.messages,
            self.cluster.fence,
            lambda: list(self.cluster.held),
            self._deliver,
            sweep_seconds=max(1.0, settings.heartbeat_seconds),
            taken=self._taken,
        )
        # The dashboard's reply as it is written, to and from the other nodes.
        self.live = LiveChatRelay(server, name, WEB_FOLLOW, holds=self.holds)
        self.routines: RoutineScheduler | None = None
        self.shared_asks = SharedAsks(self, dispatcher.asks)
        self._chains: dict[str, asyncio.Task[None]] = {}  # per bot (and "scheduler"), in order
        self._tasks: set[asyncio.Task[Any]] = set()
        # Per bot, the lease epochs this node has held: the outbox rows sent under them were
        # shown by this node's own channels (a dashboard follow skips them).
        self.epochs_held: dict[str, set[int]] = {}
        self.bot_runs = BotTasks()  # the routine runs handed here, per bot (also in _tasks)
        rows = dispatcher.outbox.rows
        if not isinstance(rows, PgOutboxRows):
            raise AtlasError("a node's outbox must be the home's PostgreSQL rows")
        self.rows = rows
        rows.lease_fence = self.cluster.fence
        dispatcher.outbox.claim_with(self.epoch_of)
        dispatcher.holds = self.holds
        self.elsewhere = NodeElsewhere(self)
        dispatcher.elsewhere = self.elsewhere  # a message for a bot held elsewhere goes there
        home.served = frozenset()  # nothing is this node's until a lease says so
        home.owned = frozenset()

    # -- what the rest of the daemon asks ---------------------------------------------------

    def holds(self, bot: str) -> bool:
        return self.cluster.fence(bot) is not None

    def epoch_of(self, bot: str) -> int:
        """The bot's lease epoch, the outbox's claim epoch; StaleEpoch when not held here."""
        fence: Fence | None = self.cluster.fence(bot)
        if fence is None:
            raise StaleEpoch(f"outbox of bot {bot}: node {self.name!r} does not hold its lease")
        return fence.epoch

    # -- running ----------------------------------------------------------------------------

    async def start(self) -> None:
        from atlas.dashboard.chat_channel import WEB_CHANNEL, BrowserChannel

        await self.inbox.start()
        browser = self.dispatcher.channels.get(WEB_CHANNEL)
        if isinstance(browser, BrowserChannel):  # a dashboard: its chat's replies go live
            self.live.watch(browser)
            await self.inbox.listen(LIVE_CHANNEL, self.live.on_notice)
        await self.cluster.start()
        self.shared_asks.start()
        log.info("node %s: started (lease %.1f s)", self.name, self.cluster.timing.lease)

    async def stop(self) -> None:
        """A clean stop: leases released (the others take the bots at their next round)."""
        await self.shared_asks.stop()
        await self.cluster.stop()
        await self.live.stop()
        await self.inbox.stop()
        await asyncio.gather(*self._chains.values(), return_exceptions=True)
        for task in list(self._tasks):  # a dashboard chat followed, a reply forwarded
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.routines is not None:
            await self.routines.stop()
            self.routines = None

    def keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _then(self, key: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` after whatever runs for `key` already (a gain, then a loss, in order)."""
        before = self._chains.get(key)

        async def chained() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            try:
                await work()
            except Exception:
                log.exception("node %s: handling %s failed", self.name, key)

        self._chains[key] = asyncio.create_task(chained(), name=f"node {self.name}: {key}")

    # -- the callbacks of ClusterNode -------------------------------------------------------

    def _gained(self, bot: str, epoch: int) -> None:
        self.epochs_held.setdefault(bot, set()).add(epoch)  # before anything is sent under it
        self._then(bot, lambda: self._start_bot(bot, epoch))

    def _lost(self, bot: str) -> None:
        self._then(bot, lambda: self._stop_bot(bot))

    def _scheduler(self, epoch: int | None) -> None:
        self._then("scheduler", lambda: self._switch_scheduler(epoch))

    async def _start_bot(self, bot: str, epoch: int) -> None:
        from atlas.channels.manager import start_channels
        from atlas.recovery import resume_interrupted_turns

        if not self.holds(bot):
            return  # lost again before its start came up
        gained_at = datetime.now(UTC)  # before its channels store anything
        self.live.clear_shown(bot)  # its replies are written here now, not relayed
        self.home.served = self.home.served | {bot}
        self.home.owned = self.home.owned | {bot}
        await start_channels(
            self.home, self.dispatcher, bots=[self.home.bot(bot)], into=self.running
        )
        if self.channels_changed is not None:
            self.channels_changed()
        try:
            recovered = await resume_interrupted_turns(
                self.dispatcher, started_at=gained_at, bots=[bot]
            )
        except StaleEpoch as exc:  # released or lost while starting: its loss comes next
            log.info("node %s: bot %s not recovered here: %s", self.name, bot, exc)
            return
        log.info(
            "node %s: serving bot %s (epoch %d); interrupted turns: %s",
            self.name,
            bot,
            epoch,
            recovered.summary(),
        )
        self.inbox.wake(bot)

    async def _stop_bot(self, bot: str) -> None:
        from atlas.channels.manager import stop_bot_channels

        self.home.served = self.home.served - {bot}
        self.home.owned = self.home.owned - {bot}
        self.live.disarm(bot)  # its replies are written elsewhere now
        # Its routine runs are tasks of their own, not lanes (forget_bot does not reach them):
        # first, so their sandboxed commands end before the channels' stop is waited for.
        await self.bot_runs.stop(bot, f"stopped: node {self.name} lost bot {bot}'s lease mid-run")
        names = await stop_bot_channels(self.running, bot)
        for name in names:
            self.dispatcher.channels.pop(name, None)
        if self.channels_changed is not None:
            self.channels_changed()
        await self.dispatcher.forget_bot(bot, f"node {self.name!r} lost its lease")
        log.info("node %s: stopped bot %s (%s)", self.name, bot, ", ".join(names) or "no channels")

    async def _switch_scheduler(self, epoch: int | None) -> None:
        if epoch is not None and self.routines is None:
            scheduler = self.make_scheduler()
            scheduler.node = self.name
            report = await scheduler.start()
            self.routines = scheduler
            log.info(
                "node %s: runs the routines (epoch %d): %s", self.name, epoch, report.summary()
            )
        elif epoch is None and self.routines is not None:
            scheduler, self.routines = self.routines, None
            await scheduler.stop()
            log.info("node %s: no longer runs the routines", self.name)
        else:
            return
        if self.on_scheduler_change is not None:
            self.on_scheduler_change(self.routines)

    # -- messages from other nodes ----------------------------------------------------------

    async def _deliver(self, conn: asyncpg.Connection, messages: list[NodeMessage]) -> None:
        """Inside the claiming transaction: what other nodes sent to a bot held here."""
        for message in messages:
            try:
                await self._handle(message)
            except Exception:  # one bad message must not hold back the bot's others
                log.exception("node %s: node message %d (%s)", self.name, message.id, message.kind)

    async def _handle(self, message: NodeMessage) -> None:
        from atlas.dashboard.chat_channel import WEB_CHANNEL

        body = message.body
        if message.kind == OUTBOX_ROW:
            row = await self.rows.get(message.to_bot, int(body["row"]))
            if row is not None and row.state in ("pending", "kept"):
                self.dispatcher.outbox.queue([row])
        elif message.kind == INBOUND:
            inbound = inbound_from(body)
            if inbound.address.channel == WEB_CHANNEL and inbound.kind == "message":
                self.live.arm(message.to_bot)  # its node shows the reply as it is written
            # Stored once: its event id (when it has one) is the platform's or the sender's.
            await self.dispatcher.submit(inbound)
        elif message.kind == STOP_TURN:
            await self.dispatcher.stop_turn_anywhere(inbound_from(body).address)
        elif message.kind == AGENT_MESSAGE:
            await self.elsewhere.deliver_here(body)
        elif message.kind == AGENT_REPLY:
            self.elsewhere.reply_here(body)
        elif message.kind == ASK_ANSWER:
            self.shared_asks.answer_here(body)
        elif message.kind == ROUTINE_RUN:
            pass  # started once the claim committed (`_taken`): never by a claim undone
        else:
            log.warning("node %s: unknown node message %r", self.name, message.kind)

    def _taken(self, messages: list[NodeMessage]) -> None:
        """After the claim committed: the routine runs handed to this node start here."""
        for message in messages:
            if message.kind == ROUTINE_RUN:
                body = message.body
                self.run_here(
                    message.to_bot, int(body["routine"]), int(body["run"]), body.get("due")
                )

    def run_here(self, bot: str, routine_id: int, run_id: int, due: str | None) -> None:
        """Start a routine run of a bot held here, kept under the bot (`bot_runs`): its loss
        stops the run, whether another node's scheduler handed it over or this node's own
        scheduler fired it."""
        task = asyncio.create_task(
            self._run_routine(routine_id, run_id, due),
            name=f"node {self.name}: routine run {run_id}",
        )
        self.keep(task)
        self.bot_runs.add(bot, task)

    async def _run_routine(self, routine_id: int, run_id: int, due: str | None) -> None:
        """A run the scheduler's node started for a bot held here: its pre-check, its turn,
        its sandboxed commands and its report all here; its record finished here."""
        from zoneinfo import ZoneInfo

        from atlas.routines.runner import execute_run
        from atlas.routines.store import RunResult

        store = self.routine_store or self.dispatcher.runtime.engines.routines
        run = await store.get_run(run_id)
        if run is None or run.status != "running":
            # Closed meanwhile (a new scheduler recorded it interrupted and told its person).
            log.info("node %s: routine run %d is no longer running; not run", self.name, run_id)
            return
        routine = await store.get(routine_id)
        if routine is None:
            await store.finish_run(run_id, RunResult("failed", error="the routine was removed"))
            return
        log.info(
            "node %s: runs routine %s (run %d) of bot %s",
            self.name,
            routine.name,
            run_id,
            routine.bot,
        )
        settings = self.home.settings
        this_run = asyncio.current_task()
        runs = NodeRuns(self)
        try:
            await execute_run(
                routine,
                run_id,
                datetime.fromisoformat(due) if due else None,
                dispatcher=runs,
                store=store,
                time_limit=settings.routines.time_limit,
                tz=ZoneInfo(settings.timezone),
                why_cancelled=lambda: self.bot_runs.why_stopped(this_run),
            )
        except asyncio.CancelledError:
            why = self.bot_runs.why_stopped(this_run)
            if why is not None:  # the bot was lost, not Atlas stopped: its person is told
                await self._tell_stopped(runs, store, routine, run_id, why)
            raise

    async def _tell_stopped(
        self, runs: NodeRuns, store: RoutineEngine, routine: Routine, run_id: int, why: str
    ) -> None:
        """A run stopped by the bot's loss: its target told once (keyed by the run), by the
        bot's new holder (an outbox row and a node message: not waited for here)."""
        from atlas.routines.runner import report_key

        address = routine.address()
        if address is None:
            return
        notice = f'Routine "{routine.name}" was {why}; it runs again at its next time.'
        try:
            await runs.enqueue(address, notice, kind="notice", key=report_key(routine, run_id))
            await store.record_delivery(run_id, f"notice queued for {routine.target}")
        except Exception:  # the run's record already says why; the notice is a courtesy
            log.exception("node %s: routine run %d: its stop not told", self.name, run_id)


class NodeElsewhere:
    """The bots held by other nodes, as the dispatcher sees them (`Dispatcher.elsewhere`):
    a message for one is a node message its holder takes (the dashboard's chat on any node,
    a notice); `message_agent` to one is delivered there and its reply comes back as a node
    message to the asking bot, whose node holds the callback that brings it into the asking
    conversation."""

    def __init__(self, node: HomeNode) -> None:
        self.node = node
        self._notifiers: dict[str, Notifier] = {}  # delivery id -> the asking conversation's

    def is_here(self, address: Address) -> bool:
        return self.node.holds(address.bot)

    async def submit(self, inbound: Inbound) -> bool:
        from atlas.dashboard.chat_channel import WEB_CHANNEL

        address = inbound.address
        if address.channel == WEB_CHANNEL and inbound.kind == "message":
            # This node's Chat page shows the holder's answer as it is sent (its rows).
            after = await self._newest_row(address)
            self.node.keep(asyncio.create_task(self._follow_web(address, after)))
        await self.node.messages.send(address.bot, INBOUND, inbound_body(inbound))
        return True

    async def _newest_row(self, address: Address) -> int:
        newest = await self.node.server.pool.fetchval(
            "SELECT max(id) FROM outbox WHERE bot = $1 AND channel = $2 AND chat = $3",
            address.bot,
            address.channel,
            address.chat,
        )
        return int(newest or 0)

    async def _follow_web(self, address: Address, after: int) -> None:
        """Show on this node's Chat page what the bot's holder sends to its dashboard chat
        (its own page has no tab open): each row once sent, until the answer; meanwhile the
        reply as it is written (`HomeNode.live`)."""
        browser = self.node.dispatcher.channels.get(address.channel)
        if browser is None:
            return
        self.node.live.follow(address.bot)
        answered = False
        try:
            answered = await self._show_rows(browser, address, after)
        finally:
            self.node.live.unfollow(address.bot, answered=answered)

    async def _show_rows(self, browser: Channel, address: Address, after: int) -> bool:
        """True once the answer was shown; False when WEB_FOLLOW ran out first.

        A row sent under a lease epoch of this node's (it took the bot over meanwhile: its
        recovery answered the message) was shown already by this node's own channel when it
        was sent: skipped, not shown twice; it still ends the follow when it is the answer.
        A row the old holder sent before the takeover is still shown, once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WEB_FOLLOW
        while loop.time() < deadline:
            await asyncio.sleep(WEB_POLL)
            rows = await self.node.server.pool.fetch(
                "SELECT id, kind, text, state, epoch FROM outbox WHERE bot = $1 AND channel = $2 "
                "AND chat = $3 AND id > $4 ORDER BY id",
                address.bot,
                address.channel,
                address.chat,
                after,
            )
            for row in rows:
                if row["state"] in ("pending", "sending", "kept"):
                    break  # shown in order: wait for this one
                after = int(row["id"])
                sent_here = row["epoch"] in self.node.epochs_held.get(address.bot, ())
                if row["state"] == "delivered" and not sent_here:
                    await browser.send(address, row["text"])
                if row["kind"] == "answer":
                    return True
        return False

    async def stop_turn(self, address: Address) -> bool:
        from atlas.dispatch import Inbound

        body = inbound_body(Inbound(address, "/stop"))
        await self.node.messages.send(address.bot, STOP_TURN, body)
        return True  # asked; the holder says "Stopped." if a turn was running

    async def conversation_mode(self, address: Address, conversation_id: int) -> str | None:
        return None  # held in the holder's memory; /mode there (not between nodes yet)

    async def deliver(
        self, delivery_id: str, sender: str, target: str, text: str, notify: Notifier | None
    ) -> None:
        """message_agent from `sender` (held here) to `target` (held elsewhere)."""
        if notify is not None:
            self._notifiers[delivery_id] = notify
        body = {"id": delivery_id, "sender": sender, "target": target, "text": text}
        await self.node.messages.send(target, AGENT_MESSAGE, body)

    async def deliver_here(self, body: dict[str, Any]) -> None:
        """A message_agent from another node to a bot held here: its turn runs here; its reply
        goes back to the asking bot as a node message."""
        from atlas.agents.channel import AGENTS_CHANNEL, AgentChannel, Delivery
        from atlas.channels.base import Address

        channel = self.node.dispatcher.channels.get(AGENTS_CHANNEL)
        if not isinstance(channel, AgentChannel):
            raise AtlasError(f"the {AGENTS_CHANNEL!r} channel is not running on this node")
        delivery_id, sender = str(body["id"]), str(body["sender"])

        async def reply(text: str) -> None:
            back = {"id": delivery_id, "text": text}
            await self.node.messages.send(sender, AGENT_REPLY, back)

        delivery = Delivery(
            id=delivery_id,
            sender=sender,
            target=str(body["target"]),
            address=Address(str(body["target"]), AGENTS_CHANNEL, sender),
            notify=reply,
        )
        await channel.deliver(self.node.dispatcher, delivery, str(body["text"]))

    def reply_here(self, body: dict[str, Any]) -> None:
        notify = self._notifiers.pop(str(body["id"]), None)
        if notify is None:
            # The asking bot moved to this node after it asked: its turn's callback was on
            # the old node. Logged, not lost silently.
            log.warning(
                "node %s: reply to %s with nobody waiting: %.200s",
                self.node.name,
                body["id"],
                body["text"],
            )
            return
        task = asyncio.create_task(notify(str(body["text"])), name=f"reply {body['id']}")
        self.node.keep(task)


class NodeRuns:
    """What the routine scheduler runs through on a node (routines.runner.RunsDetached).

    A routine's run (its pre-check, its model turn, its sandboxed commands) runs on its bot's
    holder: the scheduler's node starts it on its own run path (`HomeNode.run_here`, kept under
    the bot) when it holds the bot, and hands it to the holder otherwise (`hand_run`: a `ROUTINE_RUN` node message, taken once by whoever holds
    the bot, waiting in `node_messages` while nobody does). Its report for a bot held here goes
    out through this node's outbox; for a bot held elsewhere (lost during the run) it is
    written as an outbox row and the holder told to send it, so only the bot's owner sends.
    Either way the scheduler only follows the run's record until it ends."""

    def __init__(self, node: HomeNode) -> None:
        self.node = node
        self.outbox = self

    async def run_detached(self, bot_name: str, prompt: str, **options: Any) -> Detached:
        return await self.node.dispatcher.run_detached(bot_name, prompt, **options)

    async def call_tool_detached(
        self,
        bot_name: str,
        tool_name: str,
        arguments: dict[str, object],
        *,
        run_kind: RunKind,
        chat: str,
    ) -> ToolResult:
        return await self.node.dispatcher.call_tool_detached(
            bot_name, tool_name, arguments, run_kind=run_kind, chat=chat
        )

    async def hand_run(self, routine: Routine, run_id: int, due: datetime | None) -> bool:
        """Always True: the run goes to the node's own run path when the bot is held here
        (kept under the bot, so losing the bot stops it), else to the bot's holder (now or
        later); the scheduler follows its record either way."""
        when = due.isoformat() if due else None
        if self.node.holds(routine.bot):
            self.node.run_here(routine.bot, routine.id, run_id, when)
            return True
        body = {"run": run_id, "routine": routine.id, "due": when}
        await self.node.messages.send(routine.bot, ROUTINE_RUN, body)
        log.info(
            "node %s: routine %s (run %d) handed to bot %s's holder",
            self.node.name,
            routine.name,
            run_id,
            routine.bot,
        )
        return True

    async def enqueue(
        self,
        address: Address,
        text: str,
        files: Sequence[Path] = (),
        *,
        kind: Kind,
        key: str | None = None,
    ) -> int:
        outbox = self.node.dispatcher.outbox
        if self.node.holds(address.bot):
            return await outbox.enqueue(address, text, tuple(files), kind=kind, key=key)
        row = await self.node.rows.add(address, kind, text, tuple(files), key=key)
        if row.state in ("pending", "kept"):
            await self.node.messages.send(address.bot, OUTBOX_ROW, {"row": row.id})
        return row.id

    async def wait(self, address: Address, row_id: int) -> Delivery:
        from atlas.outbox.sender import Delivery

        if self.node.holds(address.bot):
            return await self.node.dispatcher.outbox.wait(address, row_id)
        # The holder sends it: its state is read back until it settles (the run's record
        # then says what happened), or said to be with the holder after HANDED_WAIT.
        deadline = asyncio.get_running_loop().time() + HANDED_WAIT
        while True:
            row = await self.node.rows.get(address.bot, row_id)
            if row is None:
                raise AtlasError(f"outbox of bot {address.bot}: no row {row_id}")
            if row.state not in ("pending", "kept", "sending"):
                return Delivery(row.state, row.error, row.platform_id)
            if asyncio.get_running_loop().time() > deadline:
                return Delivery("kept", "with the node that holds the bot, not sent yet")
            await asyncio.sleep(0.2)

    async def send(
        self,
        address: Address,
        text: str,
        files: Sequence[Path] = (),
        *,
        kind: Kind,
        key: str | None = None,
    ) -> Delivery:
        row_id = await self.enqueue(address, text, files, kind=kind, key=key)
        return await self.wait(address, row_id)


__all__ = ["HomeNode", "NodeElsewhere", "NodeRuns", "inbound_body", "inbound_from"]
