"""The approval gate: every tool call is judged before it runs.

`decide` says Allow, Deny or Ask; `settle` turns an Ask into an answer (a person, or deny where
nobody can answer or nobody does in time) and records every decision. `RuleGate` is the real
gate (docs/trust.md); `OpenGate` allows everything, for tests of other parts.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from atlas.providers.base import ToolCall
from atlas.tools.registry import RunContext, Tool

if TYPE_CHECKING:
    from atlas.store.home_db import HomeStore

log = logging.getLogger(__name__)

ALLOW_ONCE = "allow once"
ALLOW_CONVERSATION = "allow for this conversation"
DENY = "deny"
CHOICES = [ALLOW_ONCE, ALLOW_CONVERSATION, DENY]

AnsweredBy = Literal["rule", "guardian", "user", "timeout", "nobody", "earlier approval"]


@dataclass(frozen=True)
class Allow:
    reason: str = ""
    rule: str = "ordinary"
    answered_by: AnsweredBy = "rule"


@dataclass(frozen=True)
class Deny:
    reason: str
    rule: str = ""
    answered_by: AnsweredBy = "rule"


@dataclass(frozen=True)
class Ask:
    question: str
    rule: str = ""  # "allow for this conversation" remembers (tool, rule)
    answered_by: AnsweredBy = "rule"  # who decided to ask: a rule, or the guardian


Decision = Allow | Deny | Ask


class BaseGate:
    """What every gate shares: how long a person has to answer, and the record."""

    ask_timeout: float = 120.0
    audit: HomeStore | None = None

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        raise NotImplementedError


class OpenGate(BaseGate):
    """Allows every call: for tests of the parts around the gate."""

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        return Allow("open gate")


def arguments_digest(call: ToolCall) -> str:
    return hashlib.sha256(f"{call.name}\0{call.arguments}".encode()).hexdigest()[:16]


async def settle(gate: BaseGate, call: ToolCall, tool: Tool, run: RunContext) -> Allow | Deny:
    """Decide; turn an Ask into Allow or Deny; record the outcome."""
    decision = await gate.decide(call, tool, run)
    if isinstance(decision, Ask):
        decision = await _ask(gate, decision, call, run)
    log.info("gate: %s %s -> %s", run.bot.name, call.name, decision)
    if gate.audit is not None:
        from atlas.store.home_db import GateRecord

        await gate.audit.record_decision(
            GateRecord(
                bot=run.bot.name,
                conversation_id=run.conversation_id,
                run_kind=run.run_kind,
                tool=call.name,
                arguments_digest=arguments_digest(call),
                summary=call.arguments[:200],
                verdict="allow" if isinstance(decision, Allow) else "deny",
                rule=decision.rule,
                reason=decision.reason,
                answered_by=decision.answered_by,
            )
        )
    return decision


async def _ask(gate: BaseGate, ask: Ask, call: ToolCall, run: RunContext) -> Allow | Deny:
    remembered = (call.name, ask.rule)
    if remembered in run.state.approvals:
        return Allow("allowed earlier in this conversation", ask.rule, "earlier approval")
    if run.ask is None:
        return Deny(
            f"{ask.question} — this needs a person's approval, and nobody can answer in "
            f"a {run.run_kind} run",
            ask.rule,
            "nobody",
        )
    run.state.pending_asks.append(ask.question)
    try:
        answer = await asyncio.wait_for(run.ask(ask.question, CHOICES), gate.ask_timeout)
    except TimeoutError:
        return Deny(f"nobody answered within {gate.ask_timeout:.0f} s", ask.rule, "timeout")
    finally:
        run.state.pending_asks.remove(ask.question)
    if answer == ALLOW_CONVERSATION:
        run.state.approvals.add(remembered)
    if answer in (ALLOW_ONCE, ALLOW_CONVERSATION):
        return Allow(f"approved by the user ({answer})", ask.rule, "user")
    if answer is None:  # the channel could not put the question (e.g. a terminal with no input)
        return Deny("the approval question could not be put to anyone", ask.rule, "nobody")
    return Deny("the user denied it", ask.rule, "user")
