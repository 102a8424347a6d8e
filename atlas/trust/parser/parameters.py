"""Parameter expansions with operators, evaluated as bash does where the value is known
(issue 33, principle 2): `${PWD%/bots/*}`, `${PWD:0:1}`, `${X//a/b}`, `${X:-default}`, `${#X}`.

`evaluate` answers the expanded text, or None when the result cannot be known from the value
(an operator not read here, a pattern holding another expansion): the caller then keeps the
word as not understood rather than reading it as the plain variable.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

MAX_VALUE = 1024  # longer values are not matched against patterns (each try is a match)
MAX_REPLACED = 256  # `${X//pat/rep}` tries every span: kept short
# `${NAME…}` and `${#NAME}`; nested braces are not read (the word stays not understood).
BRACED_PARAMETER = re.compile(r"\$\{(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-])([^{}]*)\}")
SLICE = re.compile(r":\s*(-?\s*\d{1,9})(?::\s*(-?\s*\d{1,9}))?")


def evaluate(value: str | None, operator: str, *, length: bool = False) -> str | None:
    """`${NAME<operator>}` for a variable holding `value` (None: not set, or not known)."""
    if length:
        return None if value is None or operator else str(len(value))
    if not operator:
        return value
    if operator[:2] in (":-", ":=") or operator[:1] in ("-", "="):
        colon = operator.startswith(":")
        word = operator[2:] if colon else operator[1:]
        unset = value is None or (colon and value == "")
        if value is None and not unset:
            return None
        return word if unset else value
    if operator[:2] == ":+" or operator[:1] == "+":
        word = operator[2:] if operator.startswith(":") else operator[1:]
        return None if value is None else (word if value else "")
    if operator[:2] == ":?" or operator[:1] == "?":
        return value
    if value is None or len(value) > MAX_VALUE or "$" in operator or "`" in operator:
        return None
    found = SLICE.fullmatch(operator)
    if found:
        return _slice(value, found.group(1), found.group(2))
    for prefix in ("##", "#", "%%", "%"):
        if operator.startswith(prefix):
            return _remove(value, operator[len(prefix) :], prefix)
    if operator.startswith("/"):
        return _replace(value, operator[1:])
    if operator in ("^^", "^"):
        return value.upper() if operator == "^^" else value[:1].upper() + value[1:]
    if operator in (",,", ","):
        return value.lower() if operator == ",," else value[:1].lower() + value[1:]
    return None  # `@Q`, `@P`, patterns for case changes…: not read here


def _slice(value: str, offset_text: str, length_text: str | None) -> str:
    offset = int(offset_text.replace(" ", ""))
    start = max(len(value) + offset, 0) if offset < 0 else offset
    if length_text is None:
        return value[start:]
    length = int(length_text.replace(" ", ""))
    end = len(value) + length if length < 0 else start + length
    return value[start:end]


def _remove(value: str, pattern: str, operator: str) -> str:
    pattern = _unquoted(pattern)
    sizes = range(len(value) + 1)
    if operator in ("##", "%%"):
        sizes = range(len(value), -1, -1)  # longest match first
    for size in sizes:
        if operator.startswith("#") and fnmatchcase(value[:size], pattern):
            return value[size:]
        if operator.startswith("%") and fnmatchcase(value[len(value) - size :], pattern):
            return value[: len(value) - size]
    return value


def _replace(value: str, spec: str) -> str | None:
    if len(value) > MAX_REPLACED:
        return None
    every = spec.startswith("/")
    anchor = spec[:1] if spec[:1] in "#%" else ""
    spec = spec[1:] if every or anchor else spec
    pattern, _, replacement = spec.partition("/")
    pattern, replacement = _unquoted(pattern), _unquoted(replacement)
    if not pattern:
        return value
    if anchor == "#":
        for size in range(len(value), -1, -1):
            if fnmatchcase(value[:size], pattern):
                return replacement + value[size:]
        return value
    if anchor == "%":
        for size in range(len(value), -1, -1):
            if fnmatchcase(value[len(value) - size :], pattern):
                return value[: len(value) - size] + replacement
        return value
    out, index = [], 0
    while index < len(value):
        for end in range(len(value), index, -1):  # longest match at this position
            if fnmatchcase(value[index:end], pattern):
                out.append(replacement)
                index = end
                break
        else:
            out.append(value[index])
            index += 1
            continue
        if not every:
            out.append(value[index:])
            return "".join(out)
    return "".join(out)


def _unquoted(text: str) -> str:
    return text.replace("\\", "").replace('"', "").replace("'", "")


def expand_braced(word: str, known: dict[str, str]) -> str:
    """Every `${…}` in `word` whose result is knowable from `known`, evaluated; the others are
    left as written (so the word still shows a `$`: not understood)."""

    def one(match: re.Match[str]) -> str:
        length, name, operator = match.group(1) == "#", match.group(2), match.group(3)
        result = evaluate(known.get(name), operator, length=length)
        return match.group(0) if result is None or (not operator and name not in known) else result

    return BRACED_PARAMETER.sub(one, word) if "${" in word else word
