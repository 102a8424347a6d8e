"""The other forms a text can hide an instruction in, for the injection scanner (threats.py).

A model reads more than plain letters: it decodes HTML entities, percent escapes, base64, rot13
and reversed text on its own, and takes small capitals (ᴀʙᴄ) for letters. The scanner therefore
reads each such form too. Every step here is linear: C-speed library calls and bounded regexes.

    for how, form in decoded_forms(text): ...
"""

from __future__ import annotations

import base64
import binascii
import codecs
import functools
import html
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote

# A run long enough to hold a sentence ("ignore all rules" is 24 characters in base64). Bounded
# so that one run cannot make the decode itself large; padding only at the end.
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,200000}={0,2}")
_MAX_BASE64_RUNS = 64
# Decoded bytes count as text when they are UTF-8 and mostly letters, spaces and punctuation
# (a PNG or a key decodes to bytes that are not).
_PRINTABLE_SHARE = 0.9
# Blocks that hold the letter-like small capitals and phonetic letters that NFKC leaves alone.
_SMALL_CAPITAL_BLOCKS = (
    range(0x0250, 0x02B0),  # IPA extensions: ɪ ɢ ɴ ʀ ʏ ʙ ʜ ʟ
    range(0x1D00, 0x1DC0),  # phonetic extensions: ᴀ ᴄ ᴅ ᴇ ᴊ ᴋ ᴍ ᴏ ᴘ ᴛ ᴜ ᴠ ᴡ ᴢ
    range(0xA720, 0xA800),  # Latin extended-D: ꜰ ꜱ ꞯ
    range(0x1DF00, 0x1E000),  # Latin extended-G
)
_SMALL_CAPITAL_NAME = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z]{1,2})")
# Letters that small-capital generators borrow from other alphabets: ғ (Cyrillic ghe with
# stroke) for f, ǫ (o with ogonek) for q.
_BORROWED = {"ғ": "f", "ǫ": "q", "ǭ": "q"}
# The forms whose decoded text is read through look-alike letters and leetspeak too.
UNDO_SPELLING_IN = frozenset({"HTML or percent escapes", "base64"})


@functools.cache
def small_capitals() -> dict[int, str]:
    """ᴀ→a, ʙ→b, …: the small capitals by their Unicode names (NFKC folds none of them, and the
    confusables list only some)."""
    table = {ord(char): letter for char, letter in _BORROWED.items()}
    for block in _SMALL_CAPITAL_BLOCKS:
        for code in block:
            match = _SMALL_CAPITAL_NAME.fullmatch(unicodedata.name(chr(code), ""))
            if match:
                table[code] = match.group(1).lower()
    return table


def without_marks(text: str) -> str:
    """`text` without combining marks (ï→i, ŕ→r): accents do not hide an English word."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _unescaped(text: str) -> str:
    """HTML entities and percent escapes undone, twice (`%2569` is `%69` is `i`)."""
    for _ in range(2):
        text = unquote(html.unescape(text), errors="replace")
    return text


def _reads_as_text(data: bytes) -> str | None:
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not decoded:
        return None
    printable = sum(1 for c in decoded if c.isprintable() or c in "\n\t")
    letters = sum(1 for c in decoded if c.isalpha())
    if printable / len(decoded) < _PRINTABLE_SHARE or letters < len(decoded) / 3:
        return None
    return decoded


def _base64_texts(text: str) -> Iterator[str]:
    for count, run in enumerate(_BASE64_RUN.finditer(text)):
        if count >= _MAX_BASE64_RUNS:
            return
        blob = run.group(0)
        altchars = b"-_" if ("-" in blob or "_" in blob) else None
        padded = blob.rstrip("=") + "=" * (-len(blob.rstrip("=")) % 4)
        try:
            data = base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
        if decoded := _reads_as_text(data):
            yield decoded


def decoded_forms(text: str) -> Iterator[tuple[str, str]]:
    """(how it was hidden, the text as a model would read it) for each form that differs from
    `text`: escapes undone, base64 runs decoded, rot13 undone, the text reversed."""
    unescaped = _unescaped(text) if ("&" in text or "%" in text) else text
    if unescaped != text:
        yield "HTML or percent escapes", unescaped
    for decoded in _base64_texts(unescaped):
        yield "base64", decoded
    rotated = codecs.decode(unescaped, "rot13")  # changes ASCII letters only
    if rotated != unescaped:
        yield "rot13", rotated
    yield "reversed text", unescaped[::-1]
