"""Text that would steer a future run: injection patterns and invisible characters.

Memory, skills and routines are read back into a model's context later, where they are followed
as the bot's own words. A write that tries to override the rules, reveal secrets or switch off the
approval gate, or that hides characters a person reviewing it cannot see, is refused here.

    reason = scan(text)  # None when the text is clean
"""

from __future__ import annotations

import functools
import re
import unicodedata

from atlas.trust.threat_forms import UNDO_SPELLING_IN, decoded_forms, small_capitals, without_marks
from atlas.trust.threat_phrases import ENGLISH, MULTILINGUAL, after

# Format characters that render as nothing but still reach the model (zero-width spaces, bidi
# overrides, word joiners, the BOM) and Unicode "tag" characters that can spell hidden ASCII.
_ZERO_WIDTH_JOINER = "\u200d"
_EMOJI_CATEGORIES = {"So", "Sk", "Mn"}  # around a ZWJ these make an emoji sequence (👨‍💻)
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
_TAGS = range(0xE0000, 0xE0080)
_VARIATION_SUPPLEMENT = range(0xE0100, 0xE01F0)  # can smuggle bytes; emoji use only FE0E/FE0F

# Not "the": "never forget the deploy instructions" is a fair note.
_WORDS = r"(?:all|any|every|your|previous|prior|above|earlier|preceding|system|safety|original)"
_RULES = (
    r"(?:instructions?|rules?|guidelines?|guidance|directives?|prompts?|polic(?:y|ies)|"
    r"constraints?|programming|orders|commands)"
)
_SECRETS = (
    r"(?:system prompt|(?:api|secret|private|ssh) keys?|credentials?|passwords?|passphrases?|"
    r"secrets?|(?:access|auth|bearer|api) tokens?|\.env\b|id_rsa|id_ed25519)"
)
_SAFEGUARDS = (
    r"(?:approval gate|the gate|gate|approvals?|guardian|safety (?:checks?|rules?)|safeguards?|"
    r"sandbox|confirmations?|security (?:checks?|rules?)|deny list|permission checks?)"
)
_SEND = r"(?:send|forward|e-?mail|mail|upload|post|copy|cc|bcc|sync|transmit|relay|mirror|leak)"
# What a standing order to send out names when it is about data in bulk, not one named thing.
_BULK = (
    r"(?:(?:all|every|each|any|the whole|the entire|the full)\s+(?:\w+\s+){0,2}?"
    r"(?:messages?|conversations?|chats?|files?|data|notes?|memor(?:y|ies)|e-?mails?|"
    r"documents?|history|logs?|transcripts?|contents?|replies|responses|answers|outputs?|"
    r"requests?|prompts?|keys?|tokens?|secrets?|passwords?|credentials?|inbox)|everything|"
    r"a copy of)"
)
_STANDING = r"(?:always|automatically|from now on|every time|whenever|each time|henceforth)"
_HIDDEN = (
    r"(?:secretly|silently|quietly|covertly|without (?:telling|asking|informing|notifying|"
    r"mentioning)|(?:do not|don'?t) (?:tell|mention|inform))"
)
# A bounded stretch within one sentence (a dot inside a word, as in a URL, does not end it).
_GAP = r"(?:[^.!?\n]|\.(?=\S)){0,80}?"
# Where a stretch starts (`after` keeps it from running over the next start: linear).
_WHEN = r"\b(?:whenever|when|if)\b"
_TELL = (
    r"\b(?:reveal|print|show|output|leak|dump|disclose|exfiltrate|send|upload|post|share|"
    r"cat|e-?mail|forward)\b"
)
_STANDING_START = rf"\b{_STANDING}\b"
_SEND_START = rf"\b{_SEND}\b"
_CLIENT = r"\b(?:curl|wget|nc|ncat|http)\b"

# (why, pattern) on casefolded, NFKC-normalised text with whitespace collapsed. Every pattern
# is linear: no back-references, and every repetition is bounded or over disjoint tokens.
_SOURCES: list[tuple[str, str]] = [
    (
        "an instruction to ignore the rules",
        r"\b(?:ignore|disregard|forget|override|bypass|drop|discard|abandon|set aside|"
        rf"pay no attention to)\s+(?:\w+\s+){{0,3}}?{_WORDS}\s+"
        rf"(?:\w+\s+){{0,2}}?{_RULES}|"
        r"\b(?:ignore|disregard|forget)\s+(?:(?:all|everything|anything)\s+)?(?:(?:of\s+)?"
        r"(?:that|what)\s+(?:you\s+)?(?:were|was|have been|'ve been)?\s*(?:told|said|given)|"
        r"(?:the\s+|everything\s+|all\s+)?(?:above|before this|previous|prior|earlier)\b)|"
        r"\bforget\s+(?:all\s+)?(?:everything|all of it)\b",
    ),
    (
        "an instruction to replace the rules",
        rf"\b(?:new|updated|real|true)\s+(?:system\s+)?{_RULES}\s*:|"
        r"\byou are now (?:in )?(?:dan|developer mode|jailbroken|unrestricted|free of)|"
        r"\b(?:developer|god|jailbreak) mode (?:enabled|on|activated)|"
        r"\bwithout (?:any )?(?:restrictions|limitations|filters)\b|"
        r"\bfrom now on,?\s+(?:you\s+(?:are|will be|must obey|obey|answer only)|"
        r"(?:act|behave|pretend|respond) as|obey|only (?:obey|follow|listen))|"
        r"\b(?:only|always) (?:obey|follow) (?:the )?(?:instructions|orders|commands) (?:from|in)",
    ),
    (
        "an instruction to reveal secrets",
        r"\b(?:reveal|print|show|output|leak|dump|disclose|exfiltrate|send|upload|post|"
        rf"share|echo|cat|e-?mail|forward)\s+(?:\w+\s+){{0,3}}?{_SECRETS}|"
        rf"{after(_WHEN)}{_SECRETS}{_GAP}\b{_SEND}\b|"
        rf"{after(_TELL)}(?:~/\.ssh|\bid_rsa|\bid_ed25519|\.aws/credentials|/etc/shadow)",
    ),
    (
        "a standing order to send data out",
        rf"{after(_STANDING_START)}\b{_SEND}\s+(?:\w+\s+){{0,2}}?{_BULK}|"
        rf"{after(_SEND_START)}\b{_HIDDEN}\b|\b{_HIDDEN}\s+(?:\w+\s+){{0,2}}?{_SEND}\b",
    ),
    (
        "an instruction to disable the safeguards",
        r"\b(?:disable|bypass|skip|turn off|switch off|circumvent|evade|avoid|get around|"
        rf"ignore)\s+(?:\w+\s+){{0,3}}?{_SAFEGUARDS}|\benable\s+auto[\s_-]?mode\b|"
        r"\bauto_mode\s*=\s*true\b|\b(?:never|do not|don'?t|stop|no longer)\s+(?:ask|asking|"
        r"wait|waiting|request|requesting)\s+(?:\w+\s+){0,2}?(?:for\s+)?(?:approval|permission|"
        r"confirmation)",
    ),
    (
        "a command that sends secrets out",
        # Bounded, and ending at the next client: an unbounded `[^\n]*` here is quadratic on a
        # line of repeated "curl", and a bounded one still read 300 characters from each.
        rf"{_CLIENT}(?:(?!{_CLIENT})[^\n]){{0,300}}?"
        r"(?:\$\{?[a-z_]{0,40}(?:key|token|secret|password)|~/\.ssh|\.env\b|/etc/shadow)",
    ),
    (
        "text that pretends to be a system or tool message",
        r"<\s*(?:/\s*)?(?:system|im_start|im_end)\s*>|\[/?(?:system|inst)\]|<\|im_start\|>",
    ),
    *ENGLISH,  # by meaning: approve, stop asking, send the conversations out (threat_phrases.py)
]

# Spelled with no separators at all ("i g n o r e a l l ...", "i.g.n.o.r.e"): the letters alone.
_SQUEEZED_SOURCE = (
    r"(?:ignore|disregard|forget|override|bypass)(?:all|any|every|your|the|of){0,3}"
    r"(?:previous|prior|above|earlier|preceding|system|safety|original)"
    r"(?:instructions?|rules?|guidelines?|guidance|directives?|prompts?|polic(?:y|ies))|"
    r"(?:disregard|forget)(?:everything|all)?(?:above|beforethis)|"
    r"(?:reveal|print|leak|dump|show)(?:your|the|me){0,2}(?:systemprompt|apikeys?|password)|"
    r"(?:disable|bypass|skip|turnoff)(?:the|your){0,2}(?:approvalgate|guardian|safeguards?)"
)


def _fold_l(source: str) -> str:
    """The pattern for text where 1, l and i are one letter (see _skeleton)."""
    return source.replace("l", "i")


Patterns = list[tuple[str, re.Pattern[str]]]


@functools.cache
def _patterns() -> tuple[Patterns, Patterns, re.Pattern[str]]:
    """The patterns as written (with the other languages' phrases), with 1/l/i folded, and
    squeezed: compiled on the first scan, not at import (~10 ms of every process's start, where
    a first answer scans nothing)."""
    return (
        [(why, re.compile(source)) for why, source in [*_SOURCES, *MULTILINGUAL]],
        [(why, re.compile(_fold_l(source))) for why, source in _SOURCES],
        re.compile(_fold_l(_SQUEEZED_SOURCE)),
    )


# Leetspeak digits and symbols; 1 becomes l, then l and i fold into i (so "a11" and "1gn0re").
_LEET = str.maketrans(
    {"0": "o", "1": "l", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "|": "l"}
)
_LI = str.maketrans({"l": "i"})
_SPACED_OUT = re.compile(r"\b\w(?: \w\b){2,}")  # i g n o r e: single characters, single spaces
_TOKEN = re.compile(r"[\w@$|]+")


@functools.cache
def confusable_table() -> dict[int, str]:
    """Look-alikes of ASCII letters and digits (Cyrillic о, Greek ο, ...) from Unicode's
    confusables list, as kept by the confusable-homoglyphs package."""
    from confusable_homoglyphs.confusables import confusables_data

    table: dict[int, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1 or char.isascii():
            continue
        for glyph in glyphs:
            found = glyph.get("c", "")
            if len(found) == 1 and found.isascii() and found.isalnum():
                table[ord(char)] = found.casefold()
                break
    return table


def _invisible(text: str) -> str | None:
    for index, char in enumerate(text):
        code = ord(char)
        if code in _TAGS or code in _VARIATION_SUPPLEMENT:
            return f"U+{code:04X} (a hidden tag or variation character) at position {index}"
        category = unicodedata.category(char)
        if char == _ZERO_WIDTH_JOINER:
            before = unicodedata.category(text[index - 1]) if index else ""
            after = unicodedata.category(text[index + 1]) if index + 1 < len(text) else ""
            if before in _EMOJI_CATEGORIES and after in _EMOJI_CATEGORIES:
                continue  # part of an emoji sequence, visible as one glyph
        if category == "Cf" or (category == "Cc" and char not in _ALLOWED_CONTROLS):
            name = unicodedata.name(char, "a control character")
            return f"U+{code:04X} ({name.lower()}) at position {index}"
    return None


def _normalised(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).translate(small_capitals()).casefold()
    return re.sub(r"\s+", " ", folded)


def _leet_word(match: re.Match[str]) -> str:
    word = match.group(0)
    return word.translate(_LEET) if any(c.isalpha() for c in word) else word


def _skeleton(text: str) -> str:
    """The text as it reads to the eye: look-alikes mapped to ASCII, words spelled out with
    spaces joined, digits inside words read as letters, l and i folded together."""
    folded = unicodedata.normalize("NFKC", text).translate(small_capitals()).casefold()
    folded = without_marks(folded.translate(confusable_table()))
    folded = unicodedata.normalize("NFKC", folded).casefold()
    joined = _SPACED_OUT.sub(lambda m: m.group(0).replace(" ", ""), folded)
    return re.sub(r"\s+", " ", _TOKEN.sub(_leet_word, joined)).translate(_LI)


def _squeezed(skeleton: str) -> str:
    return re.sub(r"[^a-z]", "", skeleton.translate(_LEET).translate(_LI))


def scan(text: str) -> str | None:
    """Why `text` must not be stored where a model will follow it, or None when it is clean.
    The text is read as written, then in each form a model would decode on its own."""
    if hidden := _invisible(text):
        return f"it holds an invisible character: {hidden}"
    if reason := _judge(text):
        return reason
    for how, form in decoded_forms(text):
        # Rot13 or reversed text with look-alike letters on top, or in another language, is
        # far-fetched, and reading it so twice more would double the time a large skill takes.
        decoded = how in UNDO_SPELLING_IN  # new characters may appear, invisible ones too
        if decoded and (hidden := _invisible(form)):
            return f"it holds an invisible character, hidden as {how}: {hidden}"
        if reason := _judge(form, undo_spelling=decoded):
            return f"{reason}, hidden as {how}"
    return None


def _judge(text: str, *, undo_spelling: bool = True) -> str | None:
    patterns, folded_patterns, squeezed = _patterns()
    flat = _normalised(text)
    for why, pattern in patterns if undo_spelling else patterns[: len(_SOURCES)]:
        if match := pattern.search(flat):
            return f"it reads as {why} ({match.group(0).strip()!r})"
    if not undo_spelling:
        return None
    skeleton = _skeleton(text)
    for why, pattern in folded_patterns:
        if match := pattern.search(skeleton):
            return f"it reads, once its spelling is undone, as {why} ({match.group(0).strip()!r})"
    if match := squeezed.search(_squeezed(skeleton)):
        return f"it spells out an instruction letter by letter ({match.group(0)!r})"
    return None
