"""Inbound messages → one lane per conversation → turns, one at a time per conversation.

The inbound message is stored before anything else happens, so a crash never loses it, and a
platform event seen before is dropped there (no duplicate replies). A lane wakes when something
new is stored; one turn then answers everything that arrived since the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from atlas.agent.compaction import request_tokens
from atlas.agent.context import build_system_prompt
from atlas.agent.loop import TurnHooks, TurnOutcome
from atlas.agent.review import REVIEW_PROMPT, QuietTimers, ReviewGate, has_substance, transcript
from atlas.channels.base import Address, Channel, Question, QuestionOutcome
from atlas.channels.supervisor import health_lines
from atlas.errors import AtlasError
from atlas.home import Bot
from atlas.outbox.engine import StaleEpoch
from atlas.outbox.rows import Kind, Outgoing
from atlas.outbox.sender import Outbox
from atlas.pending_asks import PendingAsks
from atlas.providers.base import Message, ToolCall
from atlas.runtime import Runtime
from atlas.store.conversations import Conversation, ConversationStore
from atlas.store.db import Database
from atlas.tools.registry import Asker, Notifier, RunContext, RunKind, ToolResult
from atlas.tools.services import AgentServices
from atlas.trust.gate import BaseGate, Deny, settle
from atlas.turn_failure import TURN_FAILED as TURN_FAILED  # re-exported: older imports
from atlas.turn_failure import failure_text

log = logging.getLogger(__name__)

STOP_COMMAND = "/stop"
MODE_COMMAND = "/mode"
STATUS_COMMAND = "/status"
MODES = ("ask", "auto", "read-only")
LANE_FAULT_PAUSE = 1.0  # seconds a lane waits after a fault outside any turn


class LeaseGone(StaleEpoch):
    """A turn's bot is no longer this node's (its lease lost): its answer is not stored."""


@dataclass(frozen=True)
class Inbound:
    address: Address
    text: str
    event_id: str | None = None
    kind: Literal["message", "notice"] = "message"
    files: tuple[Path, ...] = ()
    run_kind: RunKind = "conversation"
    # Stored only if no person's message newer than this id is in the conversation (checked
    # in the same transaction): recovery's resume notice must not race a live message.
    unless_newer_than: int | None = None


@dataclass(frozen=True)
class Detached:
    conversation_id: int
    outcome: TurnOutcome | None
    error: str | None  # why there is no outcome


@dataclass
class Lane:
    """One conversation's queue: a wake-up flag, the running turn, and an idle signal."""

    address: Address
    conversation_id: int
    run_kind: RunKind
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    turn: asyncio.Task[None] | None = None
    worker: asyncio.Task[None] | None = None
    answered_upto: int | None = None  # the newest message the last finished turn saw
    # The turn's answer is stored and on its way out: nothing is left to stop, and a
    # "Stopped." after the answer arrived would tell the person something false.
    delivering: bool = False


class OtherProcesses(Protocol):
    """The bots served by other worker processes (atlas/workers/routing.py's Elsewhere)."""

    def is_here(self, address: Address) -> bool: ...

    async def submit(self, inbound: Inbound) -> bool: ...

    async def stop_turn(self, address: Address) -> bool: ...

    async def conversation_mode(self, address: Address, conversation_id: int) -> str | None: ...


class Dispatcher:
    def __init__(self, runtime: Runtime, channels: dict[str, Channel]) -> None:
        self.runtime = runtime
        self.channels = channels
        self._lanes: dict[Address, Lane] = {}
        # Every message out goes through it (atlas/outbox/): rows in each bot's store, or in
        # the home's PostgreSQL database, claimed with this process's lease epoch (0: one node).
        engines = runtime.engines
        self.outbox = Outbox(
            channels, self._database, rows=engines.outbox_rows, epoch=engines.epoch
        )
        self._limit = asyncio.Semaphore(runtime.home.settings.limits.concurrent_turns)
        review = runtime.home.settings.review
        self._quiet = (
            QuietTimers(review.quiet_minutes * 60, self._review) if review.enabled else None
        )
        # What tools that start work elsewhere use (atlas/tools/services.py); set by the layer
        # above, which builds them over this dispatcher (atlas/agents/services.py).
        self.services: AgentServices | None = None
        # Every question a turn waits on, answerable on the dashboard too (first answer wins).
        self.asks = PendingAsks()
        # Set when `atlas run` spread the home over worker processes: a message for a bot
        # served elsewhere is stored and answered there.
        self.elsewhere: OtherProcesses | None = None
        # Set on a node of a home on PostgreSQL (`atlas run --node`): whether this node holds
        # the bot's lease now. A turn that lost it stores no answer (its next owner answers).
        self.holds: Callable[[str], bool] | None = None

    async def submit(self, inbound: Inbound) -> bool:
        """Store the message and wake its conversation. False when it was a duplicate event
        (or a person's message overtook it, see `Inbound.unless_newer_than`)."""
        address = inbound.address
        if self.elsewhere is not None and not self.elsewhere.is_here(address):
            return await self.elsewhere.submit(inbound)
        if inbound.kind == "message" and inbound.text.strip() == STOP_COMMAND:
            # A stopped turn's lane says "Stopped." itself (_serve), for every way a turn is
            # stopped: saying it here too posted it twice.
            if not self.stop_turn(address):
                await self._send(address, "Nothing is running.")
            return True
        bot = self.runtime.home.bot(address.bot)
        store = await self.runtime.store(bot)
        command = inbound.text.strip().split(" ")[0] if inbound.kind == "message" else ""
        if command == MODE_COMMAND:
            await self._set_mode(inbound, bot, store)
            return True
        if command == STATUS_COMMAND:
            await self._send(address, await self._status(inbound, bot, store))
            return True
        lane = self._lanes.get(address)  # an address keeps its conversation: no lookup
        conversation_id = (
            lane.conversation_id if lane else (await self._conversation(inbound, bot, store)).id
        )
        text = inbound.text if inbound.kind == "message" else f"[notice] {inbound.text}"
        stored = await store.append(
            conversation_id,
            Message("user", text),
            event_id=inbound.event_id,
            kind=inbound.kind,
            unless_user_after=inbound.unless_newer_than,
        )
        if stored is None:
            log.info("dropped %s in %s: stored already, or overtaken", inbound.kind, address)
            return False
        if self._quiet:
            self._quiet.cancel(address)
        lane = self._lane(address, conversation_id, inbound.run_kind)
        if (
            lane.turn
            and not lane.turn.done()
            and self.runtime.home.settings.chat.mid_turn == "interrupt"
        ):
            lane.turn.cancel()
        lane.idle.clear()
        lane.wake.set()
        return True

    @staticmethod
    async def _conversation(inbound: Inbound, bot: Bot, store: ConversationStore) -> Conversation:
        """The conversation an inbound message belongs to, made on first contact."""
        address = inbound.address
        return await store.conversation(
            address.channel,
            address.chat,
            thread=address.thread,
            user=address.user,
            kind=inbound.run_kind,
            bot=bot.name,
        )

    def conversation_mode(self, address: Address, conversation_id: int) -> str | None:
        """The mode a conversation held here chose with /mode; None: the bot's own."""
        return self.runtime.state(self.runtime.home.bot(address.bot), conversation_id).mode

    async def conversation_mode_anywhere(
        self, address: Address, conversation_id: int
    ) -> str | None:
        """`conversation_mode` from the process that holds the conversation (a spread bot's
        conversation may live in another worker than its channel)."""
        if self.elsewhere is not None and not self.elsewhere.is_here(address):
            return await self.elsewhere.conversation_mode(address, conversation_id)
        return self.conversation_mode(address, conversation_id)

    async def _set_mode(self, inbound: Inbound, bot: Bot, store: ConversationStore) -> None:
        """`/mode [ask|auto|read-only]`: the gate mode of this conversation (until a restart)."""
        address = inbound.address
        conversation = await self._conversation(inbound, bot, store)
        state = self.runtime.state(bot, conversation.id)
        wanted = inbound.text.strip()[len(MODE_COMMAND) :].strip()
        if wanted in MODES:
            state.mode = wanted
            reply = f"Mode for this conversation: {wanted}."
        else:
            current = state.mode or f"{bot.settings.mode} (the bot's)"
            reply = f"Mode: {current}. Change it with /mode {' | '.join(MODES)}."
        await self._send(address, reply)

    async def _status(self, inbound: Inbound, bot: Bot, store: ConversationStore) -> str:
        """`/status`: the model, how full the context is, approvals waiting, channels' health."""
        address = inbound.address
        conversation = await self._conversation(inbound, bot, store)
        run = self._run_context(
            bot, conversation.id, inbound.run_kind, address.channel, ask=None, notify=None
        )
        loop = await self.runtime.loop(bot)
        history = await loop.load_history(run)
        specs = [t.spec(run) for t in self.runtime.registry.for_run(run)]
        used = request_tokens(build_system_prompt(run), specs, history)
        window = run.settings.limits.context_window
        lane = self._lanes.get(address)
        running = "a turn is running" if lane and lane.turn and not lane.turn.done() else "idle"
        pending = run.state.pending_asks
        lines = [
            f"Bot {bot.name}, model {bot.model}"
            + (f" (fallback {bot.fallback_model})" if bot.fallback_model else ""),
            f"Context: {used:,} of {window:,} tokens ({used / window:.0%}); compaction at "
            f"{run.settings.limits.compact_at:.0%}; {len(history)} messages in view",
            f"Mode: {run.state.mode or bot.settings.mode}; {running}",
            f"Approvals waiting: {len(pending)}" + "".join(f"\n  - {q}" for q in pending),
        ]
        channels = health_lines(self.channels, bot.name)
        if channels:
            lines.append("Channels:" + "".join(f"\n  - {line}" for line in channels))
        return "\n".join(lines)

    def has_lane(self, address: Address) -> bool:
        """Whether this conversation has had a message since the dispatcher started."""
        return address in self._lanes

    def stop_turn(self, address: Address) -> bool:
        """Cancel the conversation's running turn, if any. True when one was running."""
        lane = self._lanes.get(address)
        if lane and lane.turn and not lane.turn.done() and not lane.delivering:
            lane.turn.cancel()
            return True
        return False

    async def stop_turn_anywhere(self, address: Address) -> bool:
        """`stop_turn`, also for a conversation another worker process holds (a spread bot's,
        whose channel is here)."""
        if self.elsewhere is not None and not self.elsewhere.is_here(address):
            return await self.elsewhere.stop_turn(address)
        return self.stop_turn(address)

    async def wait_idle(self, address: Address) -> None:
        lane = self._lanes.get(address)
        if lane:
            await lane.idle.wait()

    async def forget_bot(self, bot: str, why: str) -> None:
        """This node lost the bot's lease: its lanes (and their turns, their sandboxed commands
        with them) are cancelled without a word and its outbox queues dropped; what they leave
        unanswered or unsent is in the database for the bot's next owner, whose recovery
        answers it."""
        lanes = [address for address in self._lanes if address.bot == bot]
        workers = [self._lanes[a].worker for a in lanes if self._lanes[a].worker is not None]
        for worker in workers:
            worker.cancel()  # the worker itself: a cancelled lane says no "Stopped."
        await asyncio.gather(*workers, return_exceptions=True)
        for address in lanes:
            self._lanes.pop(address, None)
            if self._quiet:
                self._quiet.cancel(address)
        await self.outbox.forget(bot, why)

    async def shutdown(self) -> None:
        if self._quiet:
            await self._quiet.shutdown()
        workers = [lane.worker for lane in self._lanes.values() if lane.worker]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._lanes.clear()
        await self.outbox.shutdown()  # what it still holds is in the stores: a start resumes it

    def _channel(self, address: Address) -> Channel:
        try:
            return self.channels[address.channel]
        except KeyError:
            raise AtlasError(f"no channel named {address.channel!r} is running") from None

    def _lane(self, address: Address, conversation_id: int, run_kind: RunKind) -> Lane:
        lane = self._lanes.get(address)
        if lane is None:
            lane = Lane(address, conversation_id, run_kind)
            lane.worker = asyncio.create_task(self._work(lane), name=f"lane {address}")
            self._lanes[address] = lane
        return lane

    async def _work(self, lane: Lane) -> None:
        """The lane's one worker: it never ends but by cancellation. A fault anywhere in a
        turn, its error path or the bookkeeping after it (a full disk failing the store's
        write) is logged and the lane serves the next message: one bad moment must not leave
        the chat unanswered until a restart."""
        while True:
            await lane.wake.wait()
            try:
                await self._serve(lane)
            except Exception:
                log.exception("lane %s: a fault after a turn; the lane goes on", lane.address)
                lane.turn = None
                lane.delivering = False
                if not lane.wake.is_set():
                    lane.idle.set()
                await asyncio.sleep(LANE_FAULT_PAUSE)  # a fault that repeats at once must not spin

    async def _serve(self, lane: Lane) -> None:
        """One wake-up: a turn for what came in, then idle unless more came meanwhile."""
        lane.wake.clear()
        async with self._limit:
            lane.turn = asyncio.create_task(self._turn(lane))
            try:
                await lane.turn
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current and current.cancelling():
                    raise  # the dispatcher is shutting down
                await self._safe_send(lane.address, "Stopped.")
            except Exception as exc:  # a bug in one turn must not silence the conversation
                log.exception("turn crashed in %s", lane.address)
                await self._safe_send(lane.address, f"Sorry, something went wrong: {exc}")
            finally:
                lane.turn = None
                lane.delivering = False
        if lane.wake.is_set() and await self._already_answered(lane):
            lane.wake.clear()  # woken by a message the finished turn had already seen
        if not lane.wake.is_set():
            lane.idle.set()
            if self._quiet and lane.run_kind == "conversation":
                self._quiet.restart(lane.address, lane.conversation_id)

    async def _already_answered(self, lane: Lane) -> bool:
        if lane.answered_upto is None:
            return False
        store = await self.runtime.store(self.runtime.home.bot(lane.address.bot))
        newest = await store.newest_user_message_id(lane.conversation_id)
        return newest is not None and newest <= lane.answered_upto

    async def _turn(self, lane: Lane) -> None:
        lane.answered_upto = None
        address = lane.address
        channel = self._channel(address)
        bot = self.runtime.home.bot(address.bot)

        async def ask(question: str, choices: list[str]) -> str | None:
            return await self.asks.approval(
                address,
                lane.conversation_id,
                question,
                choices,
                lambda: channel.ask(address, question, choices),
            )

        async def notify(text: str) -> None:
            await self.submit(Inbound(address, text, kind="notice", run_kind=lane.run_kind))

        run = self._run_context(
            bot,
            lane.conversation_id,
            lane.run_kind,
            address.channel,
            ask=ask if lane.run_kind in ("conversation", "bot") else None,
            notify=notify,
        )

        async def ask_questions(questions: list[Question]) -> QuestionOutcome:
            put = getattr(channel, "ask_questions", None)
            if put is None:  # a channel without questions (the agents channel, a test's)
                detail = f"the {address.channel} channel cannot ask questions"
                return QuestionOutcome("undelivered", detail=detail)
            return await self.asks.question_set(
                address, lane.conversation_id, questions, lambda: put(address, questions)
            )

        if lane.run_kind == "conversation":
            run.ask_questions = ask_questions
        streaming = channel.streams and self.runtime.home.settings.chat.stream

        async def on_text(text: str) -> None:
            await channel.stream(address, text)

        async def on_tool_call(call: ToolCall) -> None:
            await channel.show_tool_call(address, call)

        def answer_rows(text: str, files: list[Path], notes: list[str]) -> Outgoing:
            if self.holds is not None and not self.holds(address.bot):
                # Checked as the answer is stored: a turn that outlived its lease (a pause, a
                # lost server) leaves the message unanswered for the bot's next owner.
                raise LeaseGone(f"bot {address.bot}: this node lost its lease mid-turn")
            return Outgoing(address, text, tuple(files), tuple(f"({note})" for note in notes))

        hooks = TurnHooks(
            on_text=on_text if streaming else None,
            on_tool_call=on_tool_call,
            answer_rows=answer_rows,
        )
        await self._safe(channel.typing(address))
        loop = await self.runtime.loop(bot)
        try:
            outcome = await loop.run(run, hooks)
        except AtlasError as exc:
            log.warning("turn failed in %s: %s", address, exc)
            # The detail for the operator's own channels only (atlas/turn_failure.py).
            await self._safe_send(address, failure_text(channel, exc))
            return
        lane.answered_upto = outcome.answers_upto
        if outcome.outgoing is not None:  # its notes and the answer, stored with it
            lane.delivering = True
            await self.outbox.deliver(outcome.outgoing.rows)

    def _run_context(
        self,
        bot: Bot,
        conversation_id: int,
        run_kind: RunKind,
        channel: str,
        *,
        ask: Asker | None,
        notify: Notifier | None,
    ) -> RunContext:
        return RunContext(
            home=self.runtime.home,
            bot=bot,
            conversation_id=conversation_id,
            run_kind=run_kind,
            channel=channel,
            state=self.runtime.state(bot, conversation_id),
            ask=ask,
            notify=notify,
            supports_images=self.runtime.model.supports_images(bot.model),
            open_store=self.runtime.store,
            services=self.services,
        )

    async def run_detached(
        self,
        bot_name: str,
        prompt: str,
        *,
        run_kind: RunKind,
        chat: str,
        notify: Notifier | None = None,
        time_limit: float | None = None,
        gate: BaseGate | None = None,
        ask: Asker | None = None,
    ) -> Detached:
        """One turn in a conversation of its own: a routine run, a subagent, a review. Nobody
        is asked unless `ask` is given; nothing is sent anywhere; the caller gets the outcome."""
        bot = self.runtime.home.bot(bot_name)
        store = await self.runtime.store(bot)
        conversation = await store.conversation(run_kind, chat, kind=run_kind, bot=bot.name)
        await store.append(conversation.id, Message("user", prompt))
        run = self._run_context(bot, conversation.id, run_kind, run_kind, ask=ask, notify=notify)
        loop = await self.runtime.loop(bot, gate=gate)
        try:
            async with self._limit, asyncio.timeout(time_limit):
                outcome = await loop.run(run)
        except TimeoutError:
            return Detached(
                conversation.id, None, f"stopped after its time limit of {time_limit:.0f} s"
            )
        except AtlasError as exc:
            return Detached(conversation.id, None, str(exc))
        return Detached(conversation.id, outcome, None)

    async def call_tool_detached(
        self, bot_name: str, tool_name: str, arguments: dict[str, object], *, run_kind: RunKind,
        chat: str,
    ) -> ToolResult:  # fmt: skip
        """One tool call outside any turn (a routine's pre-check), in the conversation a
        detached run of `chat` uses, through the gate like a model's call: nobody is asked,
        so what the gate would ask about is refused."""
        bot = self.runtime.home.bot(bot_name)
        store = await self.runtime.store(bot)
        conversation = await store.conversation(run_kind, chat, kind=run_kind, bot=bot.name)
        run = self._run_context(bot, conversation.id, run_kind, run_kind, ask=None, notify=None)
        loop = await self.runtime.loop(bot)
        tool = loop.registry.get(tool_name)
        if tool is None:
            return await loop.registry.call(run, tool_name, arguments)
        call = ToolCall(f"detached-{tool_name}", tool_name, json.dumps(arguments))
        decision = await settle(loop.gate, call, tool, run)
        if isinstance(decision, Deny):
            return ToolResult(f"the approval gate denied it: {decision.reason}", is_error=True)
        async with self._limit:
            return await loop.registry.call(run, tool_name, arguments)

    @contextlib.asynccontextmanager
    async def slot_lent(self) -> AsyncIterator[None]:
        """A detached run that waits on another conversation (a subagent's ask_parent) lends
        its turn slot meanwhile: with every slot taken, the conversation it waits on could
        never run to answer it."""
        self._limit.release()
        try:
            yield
        finally:
            # Shielded: a cancel here still takes the slot back (when one frees), so the
            # caller's `async with` giving it back once more leaves the count as it was.
            await asyncio.shield(self._limit.acquire())

    async def _review(self, address: Address, conversation_id: int) -> None:
        """The background review of a conversation gone quiet (atlas/agent/review.py)."""
        bot = self.runtime.home.bot(address.bot)
        messages = await (await self.runtime.store(bot)).history(conversation_id)
        if not has_substance(messages, self.runtime.home.settings.review.min_user_messages):
            return
        channel = self._channel(address)

        async def ask(question: str, choices: list[str]) -> str | None:
            return await self.asks.approval(
                address,
                conversation_id,
                question,
                choices,
                lambda: channel.ask(address, question, choices),
            )

        result = await self.run_detached(
            bot.name,
            REVIEW_PROMPT + transcript(messages),
            run_kind="bot",
            chat=f"review:{conversation_id}:{len(messages)}",
            gate=ReviewGate(self.runtime.gate),
            ask=ask,
        )
        log.info(
            "reviewed %s#%s: %s",
            bot.name,
            conversation_id,
            result.error or (result.outcome.text[:80] if result.outcome else ""),
        )

    async def deliver(
        self, address: Address, text: str, *, kind: Kind = "report", key: str | None = None
    ) -> str | None:
        """Send through the outbox (a routine's report, a notice); None when delivered, else
        why not. With `key`, a row made for it before (a crash between enqueueing and
        recording) is the one awaited: never a second message."""
        sent = await self.outbox.send(address, text, kind=kind, key=key)
        if sent.state == "delivered":
            return None
        why = sent.error or sent.state
        if sent.state == "kept":
            return f"kept to send again ({why})"
        if sent.state == "maybe":
            return f"may not have arrived; not sent again ({why})"
        return why

    async def _safe_send(self, address: Address, text: str) -> None:
        await self._safe(self._send(address, text))

    async def _send(self, address: Address, text: str) -> None:
        """A line about a turn or a command's reply, through the outbox like every message
        (which keeps, retries and marks it: atlas/outbox/sender.py)."""
        await self.outbox.send(address, text, kind="note")

    async def _database(self, bot_name: str) -> Database:
        return (await self.runtime.store(self.runtime.home.bot(bot_name))).db

    @staticmethod
    async def _safe(action: object) -> None:
        """A failure to tell the person (the channel, or the outbox's store: a full disk) is
        logged; it must not kill the lane (the message is stored)."""
        try:
            await action  # type: ignore[misc]
        except AtlasError as exc:
            log.warning("channel: %s", exc)
        except Exception:
            log.exception("telling the person failed")


__all__ = ["Dispatcher", "Inbound"]
