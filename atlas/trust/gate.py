"""The approval gate: every tool call is judged before it runs.

`decide` says Allow, Deny or Ask; `settle` turns an Ask into an answer (a person, or deny where
nobody can answer or nobody does in time) and records every decision. `RuleGate` is the real
gate (docs/trust.md); `OpenGate` allows everything, for tests of other parts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from atlas.errors import ToolError
from atlas.providers.base import ToolCall
from atlas.tools.registry import RunContext, Tool

if TYPE_CHECKING:
    from atlas.store.home_db import HomeStore

log = logging.getLogger(__name__)

ALLOW_ONCE = "allow once"
ALLOW_CONVERSATION = "allow for this conversation"
DENY = "deny"
CHOICES = [ALLOW_ONCE, ALLOW_CONVERSATION, DENY]
ONCE_CHOICES = [ALLOW_ONCE, DENY]  # for what is asked every time (see never_remembered)
# Asks whose answer never covers a later call: acting outside the machine, leaving the sandbox,
# changing the Atlas home, what could not be judged, an untrusted MCP server's calls, acting on
# the person's own executor sessions or logging an account in (delegate's `workbench:`).
NEVER_REMEMBERED_PREFIXES = (
    "outside:",
    "sandbox:",
    "home:",
    "opaque:",
    "mcp:untrusted:",
    "workbench:",
)
NEVER_REMEMBERED_RULES = {"agents:bot-create"}

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
    """A question for a person. "allow for this conversation" remembers the exact call (the tool
    and its validated arguments), or `scope` when given: a wider scope that the question itself
    names, so the person sees what a yes will cover. Never a whole rule."""

    question: str
    rule: str = ""
    answered_by: AnsweredBy = "rule"  # who decided to ask: a rule, or the guardian
    scope: str | None = None


def never_remembered(ask: Ask) -> bool:
    """Asked every time: no "allow for this conversation" is offered, nor honoured."""
    return ask.rule.startswith(NEVER_REMEMBERED_PREFIXES) or ask.rule in NEVER_REMEMBERED_RULES


def choices_for(ask: Ask) -> list[str]:
    return list(ONCE_CHOICES if never_remembered(ask) else CHOICES)


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


def approval_key(ask: Ask, call: ToolCall, tool: Tool) -> tuple[str, str]:
    """What "allow for this conversation" remembers: the scope the question named, else the
    exact call (its arguments validated and in a canonical order, so key order and defaults
    do not matter, and any other command or path is a different call)."""
    if ask.scope:
        return call.name, f"scope:{ask.scope}"
    try:
        arguments = json.dumps(tool.parse_arguments(call.arguments), sort_keys=True, default=str)
    except ToolError:
        arguments = call.arguments
    return call.name, f"call:{arguments}"


async def settle(gate: BaseGate, call: ToolCall, tool: Tool, run: RunContext) -> Allow | Deny:
    """Decide; turn an Ask into Allow or Deny; record the outcome."""
    decision = await gate.decide(call, tool, run)
    if isinstance(decision, Ask):
        decision = await _ask(gate, decision, call, tool, run)
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


async def _ask(
    gate: BaseGate, ask: Ask, call: ToolCall, tool: Tool, run: RunContext
) -> Allow | Deny:
    remembered = None if never_remembered(ask) else approval_key(ask, call, tool)
    if remembered is not None and remembered in run.state.approvals:
        return Allow("allowed earlier in this conversation", ask.rule, "earlier approval")
    if run.ask is None:
        return Deny(
            f"{ask.question} — this needs a person's approval, and nobody can answer in "
            f"a {run.run_kind} run",
            ask.rule,
            "nobody",
        )
    question = ask.question
    if ask.scope and remembered is not None:
        question += f" (“{ALLOW_CONVERSATION}” covers {ask.scope})"
    run.state.pending_asks.append(ask.question)
    try:
        answer = await asyncio.wait_for(run.ask(question, choices_for(ask)), gate.ask_timeout)
    except TimeoutError:
        return Deny(f"nobody answered within {gate.ask_timeout:.0f} s", ask.rule, "timeout")
    finally:
        run.state.pending_asks.remove(ask.question)
    if answer == ALLOW_CONVERSATION and remembered is not None:
        run.state.approvals.add(remembered)
    if answer in (ALLOW_ONCE, ALLOW_CONVERSATION):
        return Allow(f"approved by the user ({answer})", ask.rule, "user")
    if answer is None:  # the channel could not put the question (e.g. a terminal with no input)
        return Deny("the approval question could not be put to anyone", ask.rule, "nobody")
    return Deny("the user denied it", ask.rule, "user")
