"""message_agent (bots of one home hand each other work) and bot_create (the main agent makes
a new bot, live at once). message_agent reaches the other bot through run.services
(atlas/tools/services.py); bot_create only writes into the home (atlas/newbot.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from atlas.config import NAME_PATTERN
from atlas.errors import AtlasError, ToolError
from atlas.newbot import create_bot
from atlas.tools.registry import RunContext, Tool, tool
from atlas.tools.services import NEEDS_DISPATCHER
from atlas.trust.gate import Ask

MAX_MESSAGE_CHARS = 16_000


# ---- message_agent ----------------------------------------------------------------------------


def _when_other_bots(run: RunContext) -> str | None:
    if run.run_kind == "subagent":
        return "not available to subagents"
    if run.run_kind == "routine":  # a routine reports to its person; its run has no reply to await
        return "not available in a routine run"
    if len(run.home.bots) < 2:
        return "not available: this home has only one bot"
    return None


def roster(run: RunContext) -> list[str]:
    """One line per other bot: name, title, description."""
    lines = []
    for bot in run.home.bots.values():
        if bot.name == run.bot.name:
            continue
        title = bot.settings.title or bot.name
        about = f": {bot.settings.description}" if bot.settings.description else ""
        lines.append(f"- {bot.name} ({title}){about}")
    return lines


def describe_message_agent(run: RunContext) -> str:
    return message_agent.description + "\nBots you can message:\n" + "\n".join(roster(run))


@tool(available=_when_other_bots, describe=lambda run: describe_message_agent(run))
async def message_agent(
    run: RunContext,
    target: str,
    message: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_CHARS)],
) -> str:
    """Send a message to another bot of this home (target: its name). It starts a turn in
    that bot's own conversation with you; this returns at once with a delivery id, and the
    reply (or the failure) arrives later as a notice. Give it everything it needs to know."""
    target = target.strip()
    if target == run.bot.name:
        raise ToolError("that is you; message another bot")
    if target not in run.home.bots:
        known = "\n".join(roster(run)) or "(none)"
        raise ToolError(f"no bot named {target!r}; bots you can message:\n{known}")
    if run.services is None:
        raise ToolError(NEEDS_DISPATCHER)
    delivery_id = await run.services.message_bot(run, target, message)
    where = (
        "its reply comes back to this conversation as a notice; do not wait for it"
        if run.notify
        else "this run has no conversation to bring its reply back to, so it will not reach you"
    )
    return f"Delivered to {target} as {delivery_id}; {where}."


# ---- bot_create -------------------------------------------------------------------------------


def _main_agent_in_a_conversation(run: RunContext) -> str | None:
    if run.run_kind != "conversation":
        return f"not available in a {run.run_kind} run (only in a conversation with the user)"
    if not run.bot.is_main:
        return f"only the main agent ({run.settings.main}) creates bots"
    return None


def bot_create_question(arguments: dict[str, Any]) -> Ask:
    """The gate's question for a bot_create call (atlas/trust/policy.py asks it every time)."""
    return Ask(
        f"Create the bot {arguments.get('name')!r} ({arguments.get('title')}): "
        f"{arguments.get('description')}? Allow?",
        "agents:bot-create",
    )


@tool(deferred=True, available=_main_agent_in_a_conversation)
async def bot_create(
    run: RunContext,
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=40)],
    title: Annotated[str, Field(min_length=1, max_length=80)],
    description: Annotated[str, Field(min_length=1, max_length=300, description="one line")],
    mission: Annotated[str, Field(max_length=20_000)] = "",
) -> str:
    """Create a new bot in this home; it is live at once. Ask the user first and agree on
    its name (lowercase letters, digits, - and _), title, one-line description and mission;
    the call itself asks the user for approval too. mission: its standing instructions
    (default: made from title and description)."""
    try:
        bot = create_bot(run.home, name, title, description, mission)
    except AtlasError as exc:
        raise ToolError(str(exc)) from None
    return (
        f"Created bot {bot.name!r} ({bot.settings.title}) in {bot.root}; it is live now. "
        f"Message it with message_agent; its mission is in {bot.mission_path}."
    )


AGENT_TOOLS: list[Tool] = [message_agent, bot_create]
