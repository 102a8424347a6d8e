"""Text that would steer a future run: injection patterns and invisible characters.

Memory, skills and routines are read back into a model's context later, where they are followed
as the bot's own words. A write that tries to override the rules, reveal secrets or switch off the
approval gate, or that hides characters a person reviewing it cannot see, is refused here.

    reason = scan(text)  # None when the text is clean
"""

from __future__ import annotations

import re
import unicodedata

# Format characters that render as nothing but still reach the model (zero-width spaces, bidi
# overrides, word joiners, the BOM) and Unicode "tag" characters that can spell hidden ASCII.
_ZERO_WIDTH_JOINER = "\u200d"
_EMOJI_CATEGORIES = {"So", "Sk", "Mn"}  # around a ZWJ these make an emoji sequence (👨‍💻)
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
_TAGS = range(0xE0000, 0xE0080)
_VARIATION_SUPPLEMENT = range(0xE0100, 0xE01F0)  # can smuggle bytes; emoji use only FE0E/FE0F

# Not "the": "never forget the deploy instructions" is a fair note.
_WORDS = r"(?:all|any|every|your|previous|prior|above|earlier|preceding|system|safety)"
_RULES = r"(?:instructions?|rules?|guidelines?|directives?|prompts?|polic(?:y|ies)|constraints?)"
_SECRETS = (
    r"(?:system prompt|(?:api|secret|private|ssh) keys?|credentials?|passwords?|passphrases?|"
    r"secrets?|(?:access|auth|bearer|api) tokens?|\.env\b|id_rsa|id_ed25519)"
)
_SAFEGUARDS = (
    r"(?:approval gate|the gate|gate|approvals?|guardian|safety (?:checks?|rules?)|safeguards?|"
    r"sandbox|confirmations?|security (?:checks?|rules?)|deny list|permission checks?)"
)

# (why, pattern) on casefolded, NFKC-normalised text with whitespace collapsed.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "an instruction to ignore the rules",
        re.compile(
            rf"\b(?:ignore|disregard|forget|override|bypass|drop)\s+(?:\w+\s+){{0,3}}?{_WORDS}\s+"
            rf"(?:\w+\s+){{0,2}}?{_RULES}"
        ),
    ),
    (
        "an instruction to replace the rules",
        re.compile(
            rf"\b(?:new|updated|real|true)\s+(?:system\s+)?{_RULES}\s*:|"
            r"\byou are now (?:in )?(?:dan|developer mode|jailbroken|unrestricted|free of)|"
            r"\b(?:developer|god|jailbreak) mode (?:enabled|on|activated)|"
            r"\bwithout (?:any )?(?:restrictions|limitations|filters)\b"
        ),
    ),
    (
        "an instruction to reveal secrets",
        re.compile(
            r"\b(?:reveal|print|show|output|leak|dump|disclose|exfiltrate|send|upload|post|"
            rf"share|echo|cat|email)\s+(?:\w+\s+){{0,3}}?{_SECRETS}"
        ),
    ),
    (
        "an instruction to disable the safeguards",
        re.compile(
            r"\b(?:disable|bypass|skip|turn off|switch off|circumvent|evade|avoid|get around|"
            rf"ignore)\s+(?:\w+\s+){{0,3}}?{_SAFEGUARDS}|\benable\s+auto[\s_-]?mode\b|"
            r"\bauto_mode\s*=\s*true\b"
        ),
    ),
    (
        "a command that sends secrets out",
        re.compile(
            r"\b(?:curl|wget|nc|ncat|http)\b[^\n]*(?:\$\{?[a-z_]*(?:key|token|secret|password)|"
            r"~/\.ssh|\.env\b|/etc/shadow)"
        ),
    ),
    (
        "text that pretends to be a system or tool message",
        re.compile(r"<\s*/?\s*(?:system|im_start|im_end)\s*>|\[/?(?:system|inst)\]|<\|im_start\|>"),
    ),
]


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
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold())


def scan(text: str) -> str | None:
    """Why `text` must not be stored where a model will follow it, or None when it is clean."""
    if hidden := _invisible(text):
        return f"it holds an invisible character: {hidden}"
    flat = _normalised(text)
    for why, pattern in _PATTERNS:
        if match := pattern.search(flat):
            return f"it reads as {why} ({match.group(0).strip()!r})"
    return None
