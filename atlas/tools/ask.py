"""ask_user: put a few questions with choices to the person in the chat, and wait for answers.

The channel shows them its own way (numbered on the terminal, buttons on Telegram and Slack)
and always adds "Other" for an answer in the person's own words. The result tells the model how
the wait ended: submitted (with the answers), cancelled, timed out or undelivered.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from atlas.channels.base import OTHER, Answer, Question, QuestionOutcome
from atlas.errors import ToolError
from atlas.tools.registry import RunContext, Tool, only_for, tool

MAX_QUESTIONS = 5
MAX_CHOICES = 4
MAX_QUESTION_CHARS = 500
MAX_CHOICE_CHARS = 75  # Slack's limit for a button or checkbox label


class QuestionArgument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str
    choices: list[str] = []
    multi_select: bool = Field(False, validation_alias=AliasChoices("multi_select", "multiSelect"))
    # Claude Code's short label for a question: accepted, shown before it.
    header: SkipJsonSchema[str] = ""


@tool(available=only_for("conversation"))
async def ask_user(
    run: RunContext,
    questions: Annotated[list[QuestionArgument], Field(min_length=1, max_length=MAX_QUESTIONS)],
) -> str:
    """Ask the user 1-5 questions and wait for the answers. Use it for decisions and preferences
    only they can give, not for what you can find out. Each question has up to 4 short choices,
    the recommended first; the user may always answer "Other" in their own words. multi_select
    lets them pick several."""
    # The registry hands nested arguments over as dicts (model_dump): validated again here.
    items = [QuestionArgument.model_validate(item) for item in questions]
    asked = [_question(item, number) for number, item in enumerate(items, 1)]
    ask_questions = run.ask_questions
    if ask_questions is None:
        return render(
            asked,
            QuestionOutcome(
                "undelivered", detail=f"the {run.channel} channel cannot ask questions"
            ),
            0,
        )
    timeout = run.settings.chat.ask_user_timeout
    try:
        outcome = await asyncio.wait_for(ask_questions(asked), timeout)
    except TimeoutError:
        outcome = QuestionOutcome("timed out")
    return render(asked, outcome, timeout)


def _question(item: QuestionArgument, number: int) -> Question:
    """The model's question, checked and tidied; ToolError naming what is wrong."""
    text = item.question.strip()
    if item.header.strip() and text:
        text = f"{item.header.strip()}: {text}"
    where = f"question {number}"
    if not text:
        raise ToolError(f"{where} is empty")
    if len(text) > MAX_QUESTION_CHARS:
        raise ToolError(f"{where} has {len(text)} characters; keep it under {MAX_QUESTION_CHARS}")
    choices: list[str] = []
    for choice in (c.strip() for c in item.choices):
        if not choice:
            raise ToolError(f"{where} has an empty choice")
        if len(choice) > MAX_CHOICE_CHARS:
            raise ToolError(
                f"{where}: the choice {choice[:30]!r}… is {len(choice)} characters; "
                f"keep choices under {MAX_CHOICE_CHARS} and put detail in the question"
            )
        if choice.casefold() == OTHER.casefold():
            continue  # every channel adds "Other" itself
        if choice.casefold() in (c.casefold() for c in choices):
            raise ToolError(f"{where} has the choice {choice!r} twice")
        choices.append(choice)
    if len(choices) > MAX_CHOICES:
        raise ToolError(
            f"{where} has {len(choices)} choices; give at most {MAX_CHOICES} "
            '(the user can always answer "Other")'
        )
    return Question(text, tuple(choices), item.multi_select and bool(choices))


def render(questions: list[Question], outcome: QuestionOutcome, timeout: float) -> str:
    """The tool's result: how the wait ended, and the answers when there are some."""
    detail = f" ({outcome.detail})" if outcome.detail else ""
    if outcome.status == "submitted":
        lines = ["The user answered:"]
        for number, (question, answer) in enumerate(
            zip(questions, outcome.answers, strict=False), 1
        ):
            lines.append(f"{number}. {question.text}\n   → {_answer_text(answer)}")
        return "\n".join(lines)
    if outcome.status == "cancelled":
        return (
            f"The user cancelled the questions without answering{detail}. Do not ask them "
            "again; go on with what you know, or ask in plain words what they want."
        )
    if outcome.status == "timed out":
        return (
            f"Nobody answered within {timeout:.0f} s. Say what you still need to know in your "
            "reply, or go on with the recommended choices where that is safe."
        )
    return (
        f"The questions could not be shown to the user{detail}. Ask them in your reply as "
        "plain text instead."
    )


def _answer_text(answer: Answer) -> str:
    parts = list(answer.chosen)
    if answer.other:
        parts.append(f"in their own words: {answer.other}")
    return "; ".join(parts) if parts else "(no answer)"


ASK_TOOLS: list[Tool] = [ask_user]

__all__ = ["ASK_TOOLS", "ask_user", "render"]
