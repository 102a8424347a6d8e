"""The approval gate: every tool call is judged before it runs.

Today's gate allows everything (`OpenGate`); the rules and the guardian arrive with the trust
issue behind the same `Gate.decide` contract. What the loop does with a decision — asking a
person, treating silence as deny — lives here so every caller handles it the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from atlas.providers.base import ToolCall
from atlas.tools.registry import RunContext, Tool

log = logging.getLogger(__name__)

ALLOW_ONCE = "allow once"
ALLOW_CONVERSATION = "allow for this conversation"
DENY = "deny"
CHOICES = [ALLOW_ONCE, ALLOW_CONVERSATION, DENY]


@dataclass(frozen=True)
class Allow:
    reason: str = ""


@dataclass(frozen=True)
class Deny:
    reason: str


@dataclass(frozen=True)
class Ask:
    question: str


Decision = Allow | Deny | Ask


class Gate(Protocol):
    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision: ...


class OpenGate:
    """Allows every call. A stand-in until the rules of the trust issue land."""

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        return Allow("open gate")


async def settle(gate: Gate, call: ToolCall, tool: Tool, run: RunContext) -> Allow | Deny:
    """Decide, and turn an Ask into Allow or Deny by asking the person; nobody to ask means deny."""
    decision = await gate.decide(call, tool, run)
    if isinstance(decision, Ask):
        if run.ask is None:
            decision = Deny(
                f"needs a person's approval and nobody can answer in a {run.run_kind} run"
            )
        else:
            answer = await run.ask(decision.question, CHOICES)
            if answer in (ALLOW_ONCE, ALLOW_CONVERSATION):
                decision = Allow(f"approved by the user ({answer})")
            elif answer is None:
                decision = Deny("nobody answered the approval question in time")
            else:
                decision = Deny("the user denied it")
    log.info("gate: %s %s -> %s", run.bot.name, call.name, decision)
    return decision
