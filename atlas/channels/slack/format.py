"""Slack's side of reply text: model Markdown → mrkdwn (rendered from markdown-it-py's syntax
tree, atlas/channels/markdown.py), and Block Kit for questions."""

from __future__ import annotations

import re
from typing import Any

from atlas.channels.markdown import ChatRenderer

# Slack truncates a message's text at 40,000 characters; stay clear of it.
SLACK_TEXT_LIMIT = 39_000
ASK_ACTION_PREFIX = "atlas_ask"

# Slack's own references the model may repeat: <@U123>, <#C123>, <!here>, <!subteam^S1>.
_SLACK_REF = re.compile(r"<([@#!][A-Za-z0-9^|_.-]+)>")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_MARKS = {"bold": "*", "italic": "_", "strike": "~"}


def escape_mrkdwn(text: str) -> str:
    """The three characters Slack wants escaped in message text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Mrkdwn(ChatRenderer):
    """Slack's mrkdwn: its own emphasis marks, `<url|label>` links, everything else escaped."""

    def text(self, text: str) -> str:
        parts = _SLACK_REF.split(text)
        # split() puts each reference at the odd places: those stay as Slack wrote them.
        return "".join(
            f"<{part}>" if odd else escape_mrkdwn(part)
            for odd, part in ((i % 2 == 1, p) for i, p in enumerate(parts))
        )

    def code(self, code: str) -> str:
        return f"`{escape_mrkdwn(code)}`"

    def style(self, style: str, inner: str) -> str:
        mark = _MARKS[style]
        return f"{mark}{inner}{mark}"

    def link(self, href: str, label: str, autolink: bool) -> str:
        if not href.lower().startswith(_SAFE_SCHEMES):
            return label if autolink else f"{label} ({escape_mrkdwn(href)})"
        url = escape_mrkdwn(href.replace("|", "%7C"))
        return f"<{url}>" if autolink else f"<{url}|{label.replace('|', '¦')}>"

    def quote(self, body: str) -> str:
        return "\n".join(f">{' ' if line else ''}{line}" for line in body.split("\n"))

    def code_block(self, code: str, language: str) -> str:
        # Slack would show a language tag as the code's first line: it goes.
        return f"```\n{escape_mrkdwn(code)}\n```" if code else "```\n```"

    def preformatted(self, text: str) -> str:
        return self.code_block(text, "")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Model Markdown → Slack mrkdwn: *bold*, _italic_, ~strike~, <url|links>, headings as bold,
    bullets as •, quotes, tables in a code block; code blocks lose the language tag Slack would
    show."""
    return _Mrkdwn().render(markdown)


def question_blocks(request_id: str, question: str, choices: list[str]) -> list[dict[str, Any]]:
    """A question with one button per choice; each button names its request and choice."""
    buttons = []
    for index, choice in enumerate(choices):
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": choice[:75], "emoji": True},
            "action_id": f"{ASK_ACTION_PREFIX}:{request_id}:{index}",
            "value": f"{request_id}:{index}",
        }
        if index == 0:
            button["style"] = "primary"  # the recommended choice comes first
        elif choice.lower() == "deny":
            button["style"] = "danger"
        buttons.append(button)
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": markdown_to_mrkdwn(question)}},
        {"type": "actions", "block_id": f"{ASK_ACTION_PREFIX}:{request_id}", "elements": buttons},
    ]


def answered_blocks(question: str, outcome: str) -> list[dict[str, Any]]:
    """The question as it stays after an answer (or none): buttons gone, outcome shown."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": markdown_to_mrkdwn(question)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": outcome}]},
    ]


def parse_ask_value(value: str) -> tuple[str, int] | None:
    """A button's value → (request id, choice index); None when it is not ours."""
    request_id, _, index = value.rpartition(":")
    if not request_id or not index.isdigit():
        return None
    return request_id, int(index)


__all__ = [
    "ASK_ACTION_PREFIX",
    "SLACK_TEXT_LIMIT",
    "answered_blocks",
    "escape_mrkdwn",
    "markdown_to_mrkdwn",
    "parse_ask_value",
    "question_blocks",
]
