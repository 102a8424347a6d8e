"""Slack's side of reply text: model Markdown → mrkdwn, and Block Kit for questions."""

from __future__ import annotations

import re
from typing import Any

# Slack truncates a message's text at 40,000 characters; stay clear of it.
SLACK_TEXT_LIMIT = 39_000
ASK_ACTION_PREFIX = "atlas_ask"

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^`\s]*)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\(\s*<?([^\s)>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
# Slack's own references the model may repeat: <@U123>, <#C123>, <!here>.
_SLACK_REF = re.compile(r"<([@#!][A-Za-z0-9^|_.-]+)>")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def escape_mrkdwn(text: str) -> str:
    """The three characters Slack wants escaped in message text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Inline:
    """Inline Markdown → mrkdwn; code spans and links are held aside so emphasis never reaches
    into them."""

    def __init__(self) -> None:
        self.held: list[str] = []

    def _hold(self, markup: str) -> str:
        self.held.append(markup)
        return f"\x00{len(self.held) - 1}\x00"

    def render(self, text: str) -> str:
        text = text.replace("\x00", "")
        text = _CODE_SPAN.sub(lambda m: self._hold(f"`{escape_mrkdwn(m.group(2))}`"), text)
        text = _LINK.sub(self._link, text)
        text = _AUTOLINK.sub(lambda m: self._hold(f"<{m.group(1)}>"), text)
        text = _SLACK_REF.sub(lambda m: self._hold(f"<{m.group(1)}>"), text)
        text = escape_mrkdwn(text)
        text = _BOLD_ITALIC.sub(lambda m: self._hold(f"*_{m.group(1)}_*"), text)
        text = _BOLD.sub(lambda m: self._hold(f"*{m.group(1) or m.group(2)}*"), text)
        text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
        text = _STRIKE.sub(r"~\1~", text)
        # Held pieces may hold others (bold around a link): resolve until none remain.
        while "\x00" in text:
            text = re.sub(r"\x00(\d+)\x00", lambda m: self.held[int(m.group(1))], text)
        return text

    def _link(self, match: re.Match[str]) -> str:
        label, url = match.group(1), match.group(2)
        if not url.lower().startswith(_SAFE_SCHEMES):
            return match.group(0)
        inner = _Inline().render(label).replace("|", "¦")
        return self._hold(f"<{url.replace('|', '%7C')}|{inner}>")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Model Markdown → Slack mrkdwn: *bold*, _italic_, ~strike~, <url|links>, headings as bold,
    bullets as •; code blocks keep their fence but lose the language tag Slack would show."""
    out: list[str] = []
    in_code = False
    marker = ""
    for line in markdown.split("\n"):
        fence = _FENCE.match(line)
        if fence and not in_code:
            in_code, marker = True, fence.group(1)
            out.append("```")
            continue
        if fence and in_code and fence.group(1).startswith(marker) and not fence.group(2):
            in_code = False
            out.append("```")
            continue
        if in_code:
            out.append(escape_mrkdwn(line))
            continue
        out.append(_block_line(line))
    if in_code:
        out.append("```")
    return "\n".join(out)


def _block_line(line: str) -> str:
    if heading := _HEADING.match(line):
        return f"*{_Inline().render(heading.group(1))}*"
    if _RULE.match(line):
        return "──────"
    if bullet := _BULLET.match(line):
        return f"{bullet.group(1)}• {_Inline().render(bullet.group(2))}"
    if line.lstrip().startswith(">"):
        # A quote keeps Slack's own ">" marker (it must not be escaped).
        indent, _, rest = line.partition(">")
        return f"{indent}>{_Inline().render(rest)}"
    return _Inline().render(line)


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
