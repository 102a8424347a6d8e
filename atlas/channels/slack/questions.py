"""How ask_user's questions look on Slack: one message per question with Block Kit buttons
(single choice) or checkboxes and Done (multi-select), Cancel, and a text input for "Other"
that sends its answer when Enter is pressed (an input block with `dispatch_action`).

Every element's action_id is `atlas_q:<request id>:<question>:<action>`
(atlas/channels/questions.py), so one handler serves them all and each names its own request.
"""

from __future__ import annotations

from typing import Any

from atlas.channels.base import OTHER, Question
from atlas.channels.questions import (
    CANCEL,
    CHOOSE,
    DONE,
    OTHER_TEXT,
    SELECT,
    QuestionSet,
    action_key,
    parse_action,
)
from atlas.channels.slack.format import markdown_to_mrkdwn

QUESTION_ACTION_PREFIX = "atlas_q"
LABEL_CHARS = 75  # Slack's limit for a button's or an option's text


class SlackQuestionSet(QuestionSet):
    """A QuestionSet that knows its Slack channel and each question's message ts."""

    def __init__(self, request_id: str, questions: list[Question], channel: str) -> None:
        super().__init__(request_id, questions)
        self.channel = channel
        self.message_ts: list[str] = []


def question_heading(asked: QuestionSet, index: int) -> str:
    """The question as mrkdwn, numbered when there are several."""
    total = len(asked.questions)
    head = f"*Question {index + 1} of {total}*\n" if total > 1 else ""
    return head + markdown_to_mrkdwn(asked.questions[index].text)


def ask_user_blocks(asked: QuestionSet, index: int) -> list[dict[str, Any]]:
    """One question's message: the text, its choices and Cancel, and the Other input."""
    question = asked.questions[index]

    def key(action: str, choice: int | None = None) -> str:
        return f"{QUESTION_ACTION_PREFIX}:{action_key(asked.request_id, index, action, choice)}"

    def button(label: str, action: str, choice: int | None = None) -> dict[str, Any]:
        return {
            "type": "button",
            "text": {"type": "plain_text", "text": label[:LABEL_CHARS], "emoji": True},
            "action_id": key(action, choice),
            "value": key(action, choice),
        }

    elements: list[dict[str, Any]] = []
    if question.multi_select:
        options = []
        for number, choice in enumerate(question.choices):
            option: dict[str, Any] = {
                "text": {"type": "plain_text", "text": choice[:LABEL_CHARS]},
                "value": str(number),
            }
            if number == 0:
                option["description"] = {"type": "plain_text", "text": "recommended"}
            options.append(option)
        elements.append({"type": "checkboxes", "action_id": key(SELECT), "options": options})
        elements.append({**button("Done", DONE), "style": "primary"})
    else:
        for number, choice in enumerate(question.choices):
            choice_button = button(choice, CHOOSE, number)
            if number == 0:
                choice_button["style"] = "primary"  # the recommended choice comes first
            elements.append(choice_button)
    elements.append(button("Cancel", CANCEL))
    other_label = f"{OTHER}: type your answer and press Enter"
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": question_heading(asked, index)}},
        {"type": "actions", "block_id": key("choices"), "elements": elements},
        {
            "type": "input",
            "block_id": key("other"),
            "dispatch_action": True,
            "optional": True,
            "label": {"type": "plain_text", "text": other_label},
            "element": {
                "type": "plain_text_input",
                "action_id": key(OTHER_TEXT),
                "dispatch_action_config": {"trigger_actions_on": ["on_enter_pressed"]},
            },
        },
    ]


def selection_in_state(body: dict[str, Any], asked: QuestionSet, index: int) -> set[int] | None:
    """The ticked checkboxes of a question as the interaction's `state` shows them; None when
    the payload carries no state for them."""
    values = (body.get("state") or {}).get("values") or {}
    for block in values.values():
        for action_id, element in (block or {}).items():
            action = parse_action(action_id.removeprefix(f"{QUESTION_ACTION_PREFIX}:"))
            if (
                action is not None
                and action.request_id == asked.request_id
                and action.question == index
                and action.action == SELECT
            ):
                return choice_numbers(element.get("selected_options"), asked, index)
    return None


def choice_numbers(options: Any, asked: QuestionSet, index: int) -> set[int]:
    """Checkbox options (their values are choice numbers) → valid choice numbers."""
    count = len(asked.questions[index].choices)
    numbers = set()
    for option in options or []:
        value = str((option or {}).get("value", ""))
        if value.isdigit() and int(value) < count:
            numbers.add(int(value))
    return numbers


__all__ = [
    "QUESTION_ACTION_PREFIX",
    "SlackQuestionSet",
    "choice_numbers",
    "ask_user_blocks",
    "question_heading",
    "selection_in_state",
]
