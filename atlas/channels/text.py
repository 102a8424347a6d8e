"""Reply text for chat platforms: splitting below a size limit, and Markdown → Telegram HTML.

No Markdown library is installed, so the converter is a small, careful one: it escapes all text
and only emits the tags Telegram accepts, well nested. When Telegram still rejects the markup,
the Telegram channel falls back to the plain text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

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

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"\[([^\]\n]+)\]\(\s*<?([^\s)>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_ITALIC = re.compile(
    r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])|(?<!\w)_(?=[^\s_])(.+?)(?<=[^\s_])_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


class _Inline:
    """Inline Markdown → HTML, with code spans and links held aside as placeholders so the
    emphasis patterns never reach into them."""

    def __init__(self) -> None:
        self.held: list[str] = []

    def _hold(self, markup: str) -> str:
        self.held.append(markup)
        return f"\x00{len(self.held) - 1}\x00"

    def render(self, text: str) -> str:
        text = text.replace("\x00", "")
        text = _CODE_SPAN.sub(lambda m: self._hold(f"<code>{_escape(m.group(2))}</code>"), text)
        text = _LINK.sub(self._link, text)
        text = _escape(text)
        text = _BOLD_ITALIC.sub(r"<b><i>\1</i></b>", text)
        text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
        text = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
        text = _STRIKE.sub(r"<s>\1</s>", text)
        return re.sub(r"\x00(\d+)\x00", lambda m: self.held[int(m.group(1))], text)

    def _link(self, match: re.Match[str]) -> str:
        label, url = match.group(1), match.group(2)
        if not url.lower().startswith(_SAFE_SCHEMES):
            return match.group(0)  # left as text (escaped later): no javascript: links
        inner = _Inline().render(label)
        href = html.escape(url, quote=True)
        return self._hold(f'<a href="{href}">{inner}</a>')


def markdown_to_telegram_html(markdown: str) -> str:
    """Model Markdown → the HTML subset Telegram renders: bold, italic, strike, code, pre, links,
    quotes; headings become bold, bullets become •, tables keep their shape in a <pre>."""
    out: list[str] = []
    lines = markdown.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _FENCE.match(line)
        if fence:
            marker, language = fence.group(1), fence.group(2)
            body: list[str] = []
            index += 1
            while index < len(lines):
                closing = _FENCE.match(lines[index])
                if closing and closing.group(1).startswith(marker) and not closing.group(2):
                    break
                body.append(lines[index])
                index += 1
            index += 1  # past the closing fence (or the end of an unclosed block)
            code = _escape("\n".join(body))
            attr = f' class="language-{html.escape(language, quote=True)}"' if language else ""
            out.append(f"<pre><code{attr}>{code}</code></pre>")
            continue
        if _TABLE_ROW.match(line):
            rows = []
            while index < len(lines) and _TABLE_ROW.match(lines[index]):
                rows.append(lines[index].strip())
                index += 1
            out.append(f"<pre>{_escape(chr(10).join(rows))}</pre>")
            continue
        if _QUOTE.match(line):
            quoted = []
            while index < len(lines) and (match := _QUOTE.match(lines[index])):
                quoted.append(_Inline().render(match.group(1)))
                index += 1
            out.append(f"<blockquote>{chr(10).join(quoted)}</blockquote>")
            continue
        out.append(_block_line(line))
        index += 1
    return "\n".join(out)


def _block_line(line: str) -> str:
    if heading := _HEADING.match(line):
        return f"<b>{_Inline().render(heading.group(1))}</b>"
    if _RULE.match(line):
        return "──────"
    if bullet := _BULLET.match(line):
        return f"{bullet.group(1)}• {_Inline().render(bullet.group(2))}"
    return _Inline().render(line)


__all__ = ["markdown_to_telegram_html", "split_message", "utf16_len"]
