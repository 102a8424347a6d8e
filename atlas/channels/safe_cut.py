"""Where a message may be cut when no line or word boundary is near: never inside an HTML/mrkdwn
escape (`&lt;` cut to `&l` | `t;` shows as garbage on both sides), nor between a character and
what joins or modifies it (a combining accent, a zero-width joiner, a variation selector, an
emoji skin tone), nor inside a surrogate pair (a str made from UTF-16 with surrogatepass).

Python indexes code points, so a cut never splits a character's UTF-8 bytes; these are the
cuts that are still wrong.
"""

from __future__ import annotations

import re
import unicodedata

# The escapes the renderers write (&lt; &gt; &amp; &quot; &#39; &#x27;): at most 10 characters.
_ESCAPE = re.compile(r"&(?:[A-Za-z]{2,6}|#[0-9]{1,5}|#x[0-9A-Fa-f]{1,4});")
_LONGEST_ESCAPE = 10
ZWJ = "\u200d"


def _joins_previous(char: str) -> bool:
    """Whether `char` belongs with the character before it."""
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")  # combining marks
        or char == ZWJ
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0xE0100 <= code <= 0xE01EF
        or 0x1F3FB <= code <= 0x1F3FF  # emoji skin tones
        or 0xDC00 <= code <= 0xDFFF  # the low half of a surrogate pair
    )


def safe_cut(text: str, end: int, lowest: int) -> int:
    """`end`, moved back to the nearest safe place to cut `text` (not below `lowest`); `end`
    itself when nothing safe lies between."""
    if end <= lowest or end >= len(text):
        return end
    cut = end
    window_start = max(lowest, cut - _LONGEST_ESCAPE + 1)
    amp = text.rfind("&", window_start, cut)
    if amp != -1 and (found := _ESCAPE.match(text, amp)) and found.end() > cut:
        cut = amp  # the cut fell inside this escape: it goes before it
    while cut > lowest and (_joins_previous(text[cut]) or text[cut - 1] == ZWJ):
        cut -= 1
    return cut if cut > lowest else end


__all__ = ["safe_cut"]
