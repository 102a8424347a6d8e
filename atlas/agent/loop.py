"""The tool loop: one turn of one conversation, from its history to a final answer.

context → model → tool calls → gate → tools → results → model … until the model answers
without calling a tool, a guard halts, or the round cap is reached. Every message is stored
as it is produced, so a crash loses at most the call in flight.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from atlas.agent.compaction import compact, over_budget, truncate_old_tool_outputs
from atlas.agent.context import build_system_prompt, in_answer_order, repair_history
from atlas.agent.guards import RepeatGuard
from atlas.agent.spill import spill
from atlas.agent.untrusted import wrap_untrusted_off_loop
from atlas.errors import AtlasError, ProviderError
from atlas.outbox.rows import Outgoing
from atlas.providers.base import (
    CompletionRequest,
    CompletionResponse,
    Message,
    ModelClient,
    TextSink,
    ToolCall,
    ToolSpec,
    Usage,
)
from atlas.tools.registry import RunContext, ToolRegistry, ToolResult
from atlas.tools.tool_search import prune_loaded_tools
from atlas.trust.gate import BaseGate, Deny, settle

log = logging.getLogger(__name__)

# How the note begins that a turn sends when history had to be cut to fit the window.
CONTEXT_NOTE = "This conversation is near the model's context limit"

ToolCallSink = Callable[[ToolCall], Awaitable[None] | None]
# The outbox rows that deliver a final answer (text, attached files, notes told before it),
# written in the transaction that stores the answer.
AnswerRows = Callable[[str, list[Path], list[str]], Outgoing]


class MessageStore(Protocol):
    async def append(
        self,
        conversation_id: int,
        message: Message,
        *,
        usage: Usage | None = None,
        model: str | None = None,
        answers_upto: int | None = None,
        also: Callable[[Any, int], object] | None = None,
    ) -> int | None: ...

    async def history(self, conversation_id: int) -> list[Message]: ...

    async def record_compaction(
        self, conversation_id: int, first_kept_id: int, summary: str
    ) -> None: ...

    async def last_compaction(self, conversation_id: int) -> tuple[int, str] | None: ...

    async def history_and_compaction(
        self, conversation_id: int
    ) -> tuple[list[Message], tuple[int, str] | None]: ...


@dataclass
class TurnHooks:
    """How a channel watches a turn: streamed text, and one line per tool call."""

    on_text: TextSink | None = None
    on_tool_call: ToolCallSink | None = None
    # A turn whose answer goes to a person: its rows, stored with it (atlas/outbox/).
    answer_rows: AnswerRows | None = None


@dataclass
class TurnOutcome:
    text: str
    rounds: int
    usage: Usage = field(default_factory=Usage)
    halted: bool = False
    notes: list[str] = field(default_factory=list)  # told to the user before the answer
    files: list[Path] = field(default_factory=list)  # attached to the answer by tools
    message_id: int | None = None  # the stored answer
    answers_upto: int | None = None  # the newest person's message the turn saw
    outgoing: Outgoing | None = None  # its outbox rows (notes, then the answer), when sent


@dataclass
class _Turn:
    """What one turn gathers as it goes."""

    guard: RepeatGuard = field(default_factory=RepeatGuard)
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    answers_upto: int | None = None  # the newest person's message this turn has seen

    def outcome(
        self,
        text: str,
        rounds: int,
        message_id: int | None,
        outgoing: Outgoing | None,
        *,
        halted: bool = False,
    ) -> TurnOutcome:
        return TurnOutcome(
            text,
            rounds,
            self.usage,
            halted,
            self.notes,
            self.files,
            message_id,
            self.answers_upto,
            outgoing,
        )

    def rows(self, hooks: TurnHooks, text: str) -> Outgoing | None:
        """The outbox rows of this turn's answer, when it goes to someone."""
        return hooks.answer_rows(text, self.files, self.notes) if hooks.answer_rows else None


def _add_usage(total: Usage, more: Usage) -> None:
    total.input_tokens += more.input_tokens
    total.output_tokens += more.output_tokens
    total.cache_read_tokens += more.cache_read_tokens
    total.cache_write_tokens += more.cache_write_tokens


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


def round_cap(run: RunContext) -> int:
    """Model calls one turn may make: subagents have their own cap ([agents] subagent_rounds)."""
    if run.run_kind == "subagent":
        return run.settings.agents.subagent_rounds
    return run.settings.limits.max_rounds


class ToolLoop:
    def __init__(
        self, model: ModelClient, registry: ToolRegistry, gate: BaseGate, store: MessageStore
    ) -> None:
        self.model = model
        self.registry = registry
        self.gate = gate
        self.store = store

    async def run(self, run: RunContext, hooks: TurnHooks | None = None) -> TurnOutcome:
        hooks = hooks or TurnHooks()
        system = build_system_prompt(run)
        history = await self.load_history(run)
        turn = _Turn(
            answers_upto=max((m.id for m in history if m.role == "user" and m.id), default=None)
        )
        rounds = round_cap(run)
        for round_number in range(1, rounds + 1):
            # Listed per round: a deferred tool loaded by the last round joins now, at the end.
            specs = self.registry.specs_for_run(run)
            if over_budget(run, system, specs, history):
                history = await self._compact(run, history, turn.notes)
            try:
                response = await self._call_model(run, system, specs, history, hooks)
            except ProviderError as exc:
                if not exc.context_overflow:
                    raise
                # Our estimate was short of the provider's count: compact now, then once more.
                history = await self._compact(run, history, turn.notes)
                response = await self._call_model(run, system, specs, history, hooks)
            _add_usage(turn.usage, response.usage)
            reply = response.message
            final = not reply.tool_calls
            outgoing = turn.rows(hooks, reply.content) if final else None
            stored_id = await self.store.append(
                run.conversation_id,
                reply,
                usage=response.usage,
                model=response.model,
                answers_upto=turn.answers_upto if final else None,
                also=outgoing,
            )
            history.append(reply)
            if final:
                return turn.outcome(reply.content, round_number, stored_id, outgoing)
            for result in await self._run_calls(run, reply.tool_calls, turn, hooks):
                await self.store.append(run.conversation_id, result)
                history.append(result)
            if turn.guard.halted:
                return await self._finish(run, turn.guard.halted, round_number, turn, hooks)
        note = (
            f"I stopped after {rounds} rounds of tool calls without finishing "
            "(the round limit). Tell me to go on if you want more."
        )
        return await self._finish(run, note, rounds, turn, hooks)

    async def _call_model(
        self,
        run: RunContext,
        system: str,
        specs: list[ToolSpec],
        history: list[Message],
        hooks: TurnHooks,
    ) -> CompletionResponse:
        request = CompletionRequest(
            model=run.bot.model,
            system=system,
            messages=list(history),
            tools=specs,
            max_tokens=run.settings.limits.max_tokens,
        )
        return await self.model.complete(
            request, fallback=run.bot.fallback_model, on_text=hooks.on_text
        )

    async def load_history(self, run: RunContext) -> list[Message]:
        """The stored messages as the model should see them: after the latest compaction,
        the first message, the summary, then what was kept and came since."""
        messages, compaction = await self.store.history_and_compaction(run.conversation_id)
        if compaction and messages:
            first_kept_id, summary = compaction
            kept = [m for m in messages[1:] if m.id is not None and m.id >= first_kept_id]
            messages = [messages[0], Message("user", summary), *kept]
            prune_loaded_tools(run, messages)
        return repair_history(in_answer_order(messages))

    async def _compact(
        self, run: RunContext, history: list[Message], notes: list[str]
    ) -> list[Message]:
        try:
            compacted = await compact(run, self.model, history)
        except AtlasError as exc:
            log.warning("compaction failed in %s#%s: %s", run.bot.name, run.conversation_id, exc)
            compacted, why = None, f"summarising it failed ({exc})"
        else:
            why = "there was nothing old enough to summarise"
        if compacted is None or compacted.messages[2].id is None:
            notes.append(
                f"{CONTEXT_NOTE} and {why}, so I "
                "cut the oldest tool outputs from what I send. Nothing is lost: the "
                "whole history stays stored and searchable."
            )
            return truncate_old_tool_outputs(history)
        await self.store.record_compaction(
            run.conversation_id, compacted.messages[2].id, compacted.summary
        )
        prune_loaded_tools(run, compacted.messages)  # a tool whose search result is gone unloads
        log.info(
            "compacted %s#%s: %d messages summarised",
            run.bot.name,
            run.conversation_id,
            compacted.upto_index - 1,
        )
        return compacted.messages

    async def _finish(
        self, run: RunContext, text: str, rounds: int, turn: _Turn, hooks: TurnHooks
    ) -> TurnOutcome:
        outgoing = turn.rows(hooks, text)
        stored_id = await self.store.append(
            run.conversation_id,
            Message("assistant", text),
            answers_upto=turn.answers_upto,
            also=outgoing,
        )
        return turn.outcome(text, rounds, stored_id, outgoing, halted=True)

    async def _run_calls(
        self, run: RunContext, calls: list[ToolCall], turn: _Turn, hooks: TurnHooks
    ) -> list[Message]:
        """Consecutive read-only calls run together; any other call runs alone, in order."""
        results: list[Message] = []
        batch: list[ToolCall] = []

        async def flush() -> None:
            results.extend(
                await asyncio.gather(*(self._one_call(run, c, turn, hooks) for c in batch))
            )
            batch.clear()

        for call in calls:
            tool = self.registry.get(call.name)
            if tool is not None and tool.read_only:
                batch.append(call)
                continue
            await flush()
            results.append(await self._one_call(run, call, turn, hooks))
        await flush()
        return results

    async def _one_call(
        self, run: RunContext, call: ToolCall, turn: _Turn, hooks: TurnHooks
    ) -> Message:
        if hooks.on_tool_call:
            await _maybe_await(hooks.on_tool_call(call))
        tool = self.registry.get(call.name)
        denied = False
        if tool is None or tool.unavailable_reason(run) is not None:
            # Nothing would run: the registry says why (no such tool, or not for this run)
            # before anyone is asked to approve a call that cannot happen.
            result = await self.registry.call(run, call.name, call.arguments)
        else:
            decision = await settle(self.gate, call, tool, run)
            if isinstance(decision, Deny):
                denied = True
                result = ToolResult(
                    f"Error: the approval gate denied this call: {decision.reason}", is_error=True
                )
            else:
                result = await self.registry.call(run, call.name, call.arguments)
        text = result.text
        if not result.is_error and not (tool and tool.pages_itself):
            path = run.home.spill_dir / run.bot.name / str(run.conversation_id) / f"{call.id}.txt"
            text = await asyncio.to_thread(spill, text, run.settings.limits.tool_result_chars, path)
        if result.is_error or result.failed:
            # A denial is the gate's answer, not the tool failing: pressing on halts even a
            # failure-tolerant tool.
            tolerant = bool(tool and tool.failure_tolerant) and not denied
            text += turn.guard.record_failure(
                call.name,
                call.arguments,
                result.text,
                tolerant=tolerant,
                output=not result.is_error,
            )
        turn.files.extend(result.files)
        if not result.is_error and (result.untrusted or (tool and tool.untrusted)):
            text = await wrap_untrusted_off_loop(call.name, text)
        return Message("tool", text, tool_call_id=call.id, name=call.name, images=result.images)
