"""ask_parent: a subagent's question to the agent that started it, answered in that agent's
conversation (atlas/agents/subagents.py, reached through run.services).

The question goes into the parent conversation as a notice and starts a turn there; the
parent answers with `delegate action=answer`, itself or after asking the person with
ask_user, unless the person answers on the dashboard's Waiting page first. The subagent waits
up to `[agents] ask_parent_seconds`; every other ending (a
timeout, a parent that waits for its subagents, a conversation that cannot be reached) is
"no answer", and the subagent goes on with what it knows.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from atlas.errors import ToolError
from atlas.tools.registry import RunContext, Tool, tool
from atlas.tools.services import NEEDS_DISPATCHER

MAX_QUESTION_CHARS = 2000


def subagents_only(run: RunContext) -> str | None:
    """Only a subagent has an agent that started it and can answer."""
    if run.run_kind == "subagent":
        return None
    return f"only for subagents: a {run.run_kind} run has no agent that started it to ask" + (
        " (ask the person with ask_user)" if run.run_kind == "conversation" else ""
    )


@tool(available=subagents_only)
async def ask_parent(
    run: RunContext,
    question: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)],
) -> str:
    """Ask the agent that gave you your task a question and wait for its answer (it may ask
    the user). Only for a decision or fact that blocks you and that you cannot find out
    yourself; give the options you see. The answer may be "no answer": then go on with what
    you know."""
    if run.services is None:
        raise ToolError(NEEDS_DISPATCHER)
    text = question.strip()
    if not text:
        raise ToolError("the question is empty")
    outcome = await run.services.subagents.ask_parent(run, text)
    if outcome.answer is not None and outcome.by:
        return f"{outcome.by.capitalize()} answered (question {outcome.question_id}):\n{outcome.answer}"
    if outcome.answer is not None:
        return f"The agent that started you answered (question {outcome.question_id}):\n{outcome.answer}"
    return (
        f"No answer: {outcome.why}. Go on with what you know, and say in your report what you "
        "assumed."
    )


ASK_PARENT_TOOLS: list[Tool] = [ask_parent]
