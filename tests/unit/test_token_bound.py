"""The tokenizer-free bound (`tokens_at_most`): never below the real count, and "does it fit?"
answered without loading the tokenizer when the request is clearly small."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from atlas.agent import tokens
from atlas.agent.compaction import over_budget, request_tokens, request_tokens_at_most
from atlas.providers.base import Image, Message, ToolCall, ToolSpec
from atlas.tools.tool_search import _description
from tests.helpers import make_home, run_context

SAMPLES = [
    "",
    "plain English words, punctuation; numbers 12345 67.89",
    "Ünïcödé àccents, ß, Œuvre, naïve café",
    "日本語のテキストと中文文本和한국어",
    "emoji 🎉🚀👩‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "<|endoftext|> <|fim_prefix|> special-looking strings",
    '    indented\n\tcode()\n{"json": [1, 2, 3]}\r\n',
    "a" * 5000,
    "\x00\x01 control \x7f bytes",
    "lone surrogate \ud800 in a str",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_the_bound_is_never_below_the_count(text: str) -> None:
    assert tokens.tokens_at_most(text) >= tokens.count_tokens(text)


def test_message_and_tool_bounds_are_never_below_their_counts() -> None:
    for text in SAMPLES:
        message = Message(
            "assistant", text, tool_calls=[ToolCall("c1", "read_file", '{"path": "é.txt"}')]
        )
        bound = tokens.message_tokens_at_most(message)
        assert bound >= tokens.message_tokens(Message(message.role, text, message.tool_calls))
    with_image = Message("user", "look", images=[Image("image/png", "eA==")])
    assert tokens.message_tokens_at_most(with_image) >= tokens.message_tokens(
        Message("user", "look", images=[Image("image/png", "eA==")])
    )
    spec = ToolSpec("read_file", "Read a file — «quoted» ✓", {"type": "object", "properties": {}})
    assert tokens.tool_tokens_at_most(spec) >= tokens.tool_tokens(spec)


@pytest.fixture
def no_tokenizer_loaded() -> Iterator[None]:
    tokens._encoding.cache_clear()
    yield
    tokens._encoding.cache_clear()


@pytest.mark.usefixtures("no_tokenizer_loaded")
def test_a_small_request_is_judged_without_loading_the_tokenizer(tmp_path: Path) -> None:
    run = run_context(make_home(tmp_path / "home"))
    history = [Message("user", f"question {n} ¿qué?") for n in range(20)]
    spec = ToolSpec("find_files", "Find files by glob.", {"type": "object", "properties": {}})
    assert not over_budget(run, "You are a helpful bot.", [spec], history)
    assert _description(1000, (("built-in", ("web_fetch", "web_search")),)).endswith("web_search")
    assert tokens._encoding.cache_info().currsize == 0, "the tokenizer was loaded"


def test_over_budget_still_counts_when_the_bound_is_over(tmp_path: Path) -> None:
    run = run_context(make_home(tmp_path / "home"))
    limits = run.settings.limits
    budget = limits.context_window * limits.compact_at
    # ~4 bytes a token: bytes over the budget, tokens well under it
    words = ["word"] * int(budget * 0.5)
    history = [Message("user", " ".join(words))]
    assert request_tokens_at_most("", [], history) > budget
    assert request_tokens("", [], history) < budget
    assert not over_budget(run, "", [], history)
    history.append(Message("user", " ".join(words)))
    history.append(Message("user", " ".join(words)))
    assert over_budget(run, "", [], history) == (request_tokens("", [], history) > budget)


def test_a_tools_bound_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for every tool in every model round: its wire form is serialised once."""
    spec = ToolSpec("once_only", "A tool asked about often.", {"type": "object"})
    made: list[str] = []
    real = tokens._wire_form
    monkeypatch.setattr(tokens, "_wire_form", lambda s: made.append(s.name) or real(s))
    first = tokens.tool_tokens_at_most(spec)
    assert [tokens.tool_tokens_at_most(spec) for _ in range(5)] == [first] * 5
    assert made == ["once_only"]


def test_a_messages_bound_is_worked_out_once_and_is_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bound is asked for every message before every model call: kept on the message (a
    Message is never changed), never shared with another message."""
    sized: list[str] = []
    real = tokens._message_size
    monkeypatch.setattr(
        tokens, "_message_size", lambda m, size: sized.append(m.content) or real(m, size)
    )
    short, long = Message("user", "short"), Message("user", "a much longer message ✓" * 10)
    history = [short, long]
    first = request_tokens_at_most("", [], history)
    assert request_tokens_at_most("", [], history) == first
    assert sized == ["short", long.content]  # each sized once
    assert tokens.message_tokens_at_most(short) == real(short, tokens.tokens_at_most)
    assert tokens.message_tokens_at_most(long) == real(long, tokens.tokens_at_most)
    assert tokens.message_tokens_at_most(Message("user", "short!")) == (
        tokens.message_tokens_at_most(short) + 1
    )
