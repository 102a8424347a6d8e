"""Reply text for chat platforms: splitting below a size limit, and Markdown → Telegram HTML.

The HTML is rendered from markdown-it-py's syntax tree (atlas/channels/markdown.py): all text is
escaped and only the tags Telegram accepts are emitted, well nested. When Telegram still rejects
the markup, the Telegram channel falls back to the plain text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from atlas.channels.markdown import ChatRenderer
from atlas.channels.safe_cut import safe_cut

Measure = Callable[[str], int]

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^`\s]*)")
# A boundary this early in a chunk wastes too much of it: a weaker boundary later is better.
_MIN_SHARE = 0.3


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: how Telegram counts its 4,096 limit."""
    return len(text.encode("utf-16-le")) // 2


def _open_fence(text: str, fence: tuple[str, str] | None = None) -> tuple[str, str] | None:
    """The (marker, language) of a code fence left open at the end of `text`, or None."""
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        marker, info = match.group(1), match.group(2)
        if fence is None:
            fence = (marker, info)
        elif _closes(line, fence):
            fence = None
    return fence


def _closes(line: str, fence: tuple[str, str]) -> bool:
    match = _FENCE.match(line)
    return bool(
        match
        and match.group(1)[0] == fence[0][0]
        and len(match.group(1)) >= len(fence[0])
        and not match.group(2)
    )


def _fit(text: str, budget: int, measure: Measure) -> int:
    """The largest prefix length of `text` whose measure stays within `budget`."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def _cut_point(text: str, end: int, start: int) -> tuple[int, int]:
    """Where to cut `text[:end]`: (end of this chunk, start of the next), at the best boundary."""
    floor = start + int((end - start) * _MIN_SHARE)
    for boundary in ("\n\n", "\n", " "):
        at = text.rfind(boundary, start, end)
        if at > floor:
            return at, at + len(boundary)
    return end, end


def split_message(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split `text` into chunks of at most `limit` (by `measure`), at paragraph, then line, then
    word, then hard boundaries. A code fence open at a cut is closed at the end of the chunk and
    reopened, with its language, at the start of the next."""
    if limit < 16:
        raise ValueError(f"limit {limit} is too small to split a message into")
    chunks: list[str] = []
    rest, reopen, fence = text, "", None
    while True:
        candidate = reopen + rest
        if measure(candidate) <= limit:
            if candidate.strip():
                chunks.append(candidate)
            return chunks or [""]
        # Cut; if that leaves a fence open, cut again leaving room to close it.
        closing = ""
        while True:
            end = _fit(candidate, limit - measure(closing), measure)
            cut, resume = _cut_point(candidate, end, len(reopen))
            if cut <= len(reopen):  # nothing but the reopened fence fits: cut hard
                cut = resume = max(end, len(reopen) + 1)
            if cut == end:  # no boundary: never inside an escape or a character's sequence
                cut = resume = safe_cut(candidate, end, len(reopen) + 1)
            head = candidate[:cut].rstrip("\n")
            fence = _open_fence(candidate[:cut], None)
            needed = "\n" + fence[0] if fence else ""
            if measure(needed) <= measure(closing):
                break
            closing = needed
        chunks.append(head + needed)
        rest = candidate[resume:]
        if fence and _closes(rest.lstrip("\n").split("\n", 1)[0], fence):
            # The cut fell just before the fence's own closing line: it is closed already.
            rest = rest.lstrip("\n").partition("\n")[2]
            fence = None
        if fence and rest.startswith("\n"):
            rest = rest[1:]
        elif not fence:
            rest = rest.lstrip("\n")
        reopen = f"{fence[0]}{fence[1]}\n" if fence else ""


# ---------------------------------------------------------------- Markdown → Telegram HTML

_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_TAGS = {"bold": "b", "italic": "i", "strike": "s"}


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


class _TelegramHTML(ChatRenderer):
    """The HTML subset Telegram's parse_mode=HTML accepts, every text escaped."""

    def text(self, text: str) -> str:
        return _escape(text)

    def code(self, code: str) -> str:
        return f"<code>{_escape(code)}</code>"

    def style(self, style: str, inner: str) -> str:
        tag = _TAGS[style]
        return f"<{tag}>{inner}</{tag}>"

    def link(self, href: str, label: str, autolink: bool) -> str:
        if not href.lower().startswith(_SAFE_SCHEMES):
            # Telegram would refuse the tag; a relative or odd link stays readable as text.
            return label if autolink else f"{label} ({_escape(href)})"
        return f'<a href="{html.escape(href, quote=True)}">{label}</a>'

    def quote(self, body: str) -> str:
        return f"<blockquote>{body}</blockquote>"

    def code_block(self, code: str, language: str) -> str:
        attr = f' class="language-{html.escape(language, quote=True)}"' if language else ""
        return f"<pre><code{attr}>{_escape(code)}</code></pre>"

    def preformatted(self, text: str) -> str:
        return f"<pre>{_escape(text)}</pre>"


def markdown_to_telegram_html(markdown: str) -> str:
    """Model Markdown → the HTML subset Telegram renders: bold, italic, strike, code, pre, links,
    quotes; headings become bold, bullets become •, tables keep their shape in a <pre>."""
    return _TelegramHTML().render(markdown)


__all__ = ["markdown_to_telegram_html", "split_message", "utf16_len"]
