"""Splitting replies and Markdown → Telegram HTML."""

from __future__ import annotations

import pytest

from atlas.channels.telegram.text import markdown_to_telegram_html, split_message, utf16_len


def test_utf16_counts_astral_characters_twice() -> None:
    assert utf16_len("a🙂é") == 4


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello", 100) == ["hello"]


def test_splits_at_paragraphs_before_lines() -> None:
    text = "first paragraph line one\nline two\n\nsecond paragraph\n\nthird"
    chunks = split_message(text, 40)
    assert chunks[0] == "first paragraph line one\nline two"
    assert all(len(c) <= 40 for c in chunks)
    assert "".join(chunks).replace("\n", "") == text.replace("\n", "")


def test_splits_at_lines_then_words_then_hard() -> None:
    assert split_message("aaaa bbbb\ncccc dddd", 16) == ["aaaa bbbb", "cccc dddd"]
    assert split_message("x" * 40, 16) == ["x" * 16, "x" * 16, "x" * 8]


def test_open_code_fence_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"print({i})" for i in range(30))
    chunks = split_message(f"intro\n\n```python\n{code}\n```\n\nafter", 80)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 80
        assert chunk.count("```") % 2 == 0, chunk
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n")
    body = "".join(chunks)
    for i in range(30):
        assert body.count(f"print({i})") == 1
    assert chunks[-1].endswith("after")


def test_limit_is_measured_with_the_given_measure() -> None:
    text = "🙂" * 50
    chunks = split_message(text, 20, utf16_len)
    assert all(utf16_len(c) <= 20 for c in chunks)
    assert "".join(chunks) == text


def test_too_small_a_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        split_message("text", 3)


def test_markdown_inline_styles_and_escaping() -> None:
    html = markdown_to_telegram_html("**bold** and *it* and `a<b>` & ~~gone~~ 5 < 6")
    assert (
        html == "<b>bold</b> and <i>it</i> and <code>a&lt;b&gt;</code> &amp; <s>gone</s> 5 &lt; 6"
    )


def test_markdown_links_only_safe_schemes() -> None:
    assert markdown_to_telegram_html("[site](https://x.org/?a=1&b=2)") == (
        '<a href="https://x.org/?a=1&amp;b=2">site</a>'
    )
    assert "<a" not in markdown_to_telegram_html("[bad](javascript:alert(1))")


def test_markdown_blocks() -> None:
    md = "# Title\n- one\n- **two**\n\n```py\nif a < b:\n    pass\n```\n> quoted"
    assert markdown_to_telegram_html(md) == (
        "<b>Title</b>\n• one\n• <b>two</b>\n\n"
        '<pre><code class="language-py">if a &lt; b:\n    pass</code></pre>\n'
        "<blockquote>quoted</blockquote>"
    )


def test_snake_case_and_code_keep_their_underscores() -> None:
    assert markdown_to_telegram_html("use my_var_name here") == "use my_var_name here"
    assert markdown_to_telegram_html("`**not bold**`") == "<code>**not bold**</code>"


def test_unclosed_fence_is_still_one_pre_block() -> None:
    assert markdown_to_telegram_html("```\nx = 1") == "<pre><code>x = 1</code></pre>"


# ---------------------------------------------------------------- CommonMark edges (markdown-it-py)


def test_lists_nest_and_keep_their_numbers() -> None:
    md = "1. one\n2. two\n   - sub **b**\n   - sub2"
    assert markdown_to_telegram_html(md) == "1. one\n2. two\n   • sub <b>b</b>\n   • sub2"


def test_a_table_is_laid_out_in_columns_inside_pre() -> None:
    md = "| name | n |\n|---|--:|\n| a<b | **10** |"
    assert markdown_to_telegram_html(md) == (
        "<pre>| name | n  |\n|------|----|\n| a&lt;b  | 10 |</pre>"
    )


def test_a_link_telegram_would_refuse_stays_readable_text() -> None:
    assert markdown_to_telegram_html("[notes](notes.md)") == "notes (notes.md)"
    assert markdown_to_telegram_html("<https://x.org>") == (
        '<a href="https://x.org">https://x.org</a>'
    )


def test_raw_html_and_entities_are_text() -> None:
    assert (
        markdown_to_telegram_html("<div>**x**</div> &copy;") == "&lt;div&gt;<b>x</b>&lt;/div&gt; ©"
    )


def test_a_bold_heading_is_bold_once_and_blank_lines_collapse() -> None:
    assert markdown_to_telegram_html("# **Big** news\n\n\n\nbody") == "<b>Big news</b>\n\nbody"


def test_mrkdwn_keeps_slack_references_and_links() -> None:
    from atlas.channels.slack.format import markdown_to_mrkdwn

    assert markdown_to_mrkdwn("<!here> see <https://a.b> and [x|y](https://q.r/a|b)") == (
        "<!here> see <https://a.b> and <https://q.r/a%7Cb|x¦y>"
    )
    assert markdown_to_mrkdwn("> quoted **b**\n>\n> more") == "> quoted *b*\n>\n> more"
    assert (
        markdown_to_mrkdwn("| a |\n|---|\n| <1> |") == "```\n| a   |\n|-----|\n| &lt;1&gt; |\n```"
    )
