"""Background review: when a conversation goes quiet, a run reads it and may keep what was
learned — facts about the user in the home's shared profile (USER.md, which every bot reads),
lessons in the bot's own MEMORY.md, a procedure worked out as a skill.

The review runs in a conversation of its own and never writes to the one it reads. Its gate lets
through only reading and skill tools and `memory`; there an add goes in, but a replace or a remove
is a proposal the person approves in the chat. These limits come on top of the daemon's own gate,
never instead of it: a review cannot read the vault or anything the rules refuse, and what the
rules would ask about is refused (the review puts only its memory proposals to the person). It
costs nothing when disabled.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from atlas.providers.base import Message, ToolCall
from atlas.tools.registry import RunContext, Tool
from atlas.trust.gate import Allow, Ask, BaseGate, Decision, Deny

if TYPE_CHECKING:
    from atlas.channels.base import Address

log = logging.getLogger(__name__)

REVIEW_TOOLS = {"use_skill", "read_file", "find_files", "skill_manage"}
TRANSCRIPT_CHARS = 40_000  # the latest part of the conversation the review reads
NOTHING = "[NOTHING]"

REVIEW_PROMPT = """\
This is a background review of a conversation you had (below, as data). Keep what will help in
later conversations, and nothing else:
- durable facts about the user (who they are, preferences) → `memory` with target user: the
  home's one profile of the user, which every bot reads;
- lessons about tools, setup or this machine → `memory` with target memory, your own notes;
- a multi-step procedure that worked and will recur → a skill with `skill_manage`
  (check `use_skill`'s list first: patch an existing skill rather than duplicate it).
Do not record task progress or anything already in memory. If nothing is worth keeping, answer
exactly [NOTHING].

Conversation:
"""


class ReviewGate(BaseGate):
    """Only the review's tools; memory changes beyond adding are put to the person; and every
    call is judged by the base gate too (its Deny or Ask wins over the review's Allow)."""

    def __init__(self, base: BaseGate) -> None:
        self.base = base
        self.audit = base.audit
        self.ask_timeout = base.ask_timeout

    async def decide(self, call: ToolCall, tool: Tool, run: RunContext) -> Decision:
        own = self._review_limits(call, tool)
        if isinstance(own, Deny):
            return own
        base = await self.base.decide(call, tool, run)
        if isinstance(base, Ask):  # a review puts only its memory proposals to the person
            return Deny(f"a background review does not ask for this ({base.question})", base.rule)
        if isinstance(base, Deny) or isinstance(own, Allow):
            return base
        return own  # the review's own question (a memory change); the base had no objection

    def _review_limits(self, call: ToolCall, tool: Tool) -> Decision:
        if tool.name in REVIEW_TOOLS:
            return Allow("a review tool", "review")
        if tool.name != "memory":
            return Deny(
                f"a background review may use only memory and {sorted(REVIEW_TOOLS)}",
                "review:tools",
            )
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            return Allow("the tool itself refuses these arguments", "arguments")
        ops = args.get("operations") or [args]
        changes = [
            op for op in ops if isinstance(op, dict) and op.get("action") in ("replace", "remove")
        ]
        if not changes:
            return Allow("adding to memory", "review:memory-add")
        shown = "; ".join(
            f"{op['action']} “{str(op.get('old_text', ''))[:80]}”"
            + (f" → “{str(op.get('content', ''))[:120]}”" if op["action"] == "replace" else "")
            for op in changes
        )
        notes = (  # the profile is every bot's: say so, the person approves for all of them
            "the profile of you that every bot of this home reads"
            if args.get("target") == "user"
            else f"my {args.get('target')} notes"
        )
        return Ask(
            f"Looking back at our conversation, I would change {notes}: {shown}. Approve?",
            "review:memory-change",
        )


def transcript(messages: list[Message]) -> str:
    lines = [
        f"[{m.role}] {m.content}" for m in messages if m.role in ("user", "assistant") and m.content
    ]
    text = "\n".join(lines)
    return text[-TRANSCRIPT_CHARS:]


def has_substance(messages: list[Message], min_user_messages: int) -> bool:
    return sum(1 for m in messages if m.role == "user") >= min_user_messages


ReviewRunner = Callable[["Address", int], Awaitable[None]]


class QuietTimers:
    """One timer per conversation: restarted by every turn, cancelled by a new message, firing
    `run(address, conversation_id)` after `quiet_seconds` of silence. Tasks are kept and
    cancelled on shutdown."""

    def __init__(self, quiet_seconds: float, run: ReviewRunner) -> None:
        self.quiet_seconds = quiet_seconds
        self.run = run
        self._timers: dict[Address, asyncio.Task[None]] = {}

    def restart(self, address: Address, conversation_id: int) -> None:
        self.cancel(address)
        self._timers[address] = asyncio.create_task(self._wait_then_run(address, conversation_id))

    def cancel(self, address: Address) -> None:
        timer = self._timers.pop(address, None)
        if timer and not timer.done():
            timer.cancel()

    async def _wait_then_run(self, address: Address, conversation_id: int) -> None:
        await asyncio.sleep(self.quiet_seconds)
        self._timers.pop(address, None)
        try:
            await self.run(address, conversation_id)
        except Exception:  # a failed review must never reach the conversation
            log.exception("background review of %s failed", address)

    async def shutdown(self) -> None:
        timers = list(self._timers.values())
        self._timers.clear()
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
