"""String literals in inline code, read with linear scans: a literal (its f-string or template
fields taken as filled in at run time), a list of literals, and whether a literal is changed before
use (joined, sliced, formatted), which makes what it names unknown."""

from __future__ import annotations

import re

from atlas.trust.parser.parse_types import SUBSTITUTION


def string_literal(text: str, start: int) -> tuple[str, int] | None:
    """The string literal at `start` (after optional r/b/u/f prefixes): (value, end index)."""
    index = start
    while index < len(text) and text[index] in " \t\n(":
        index += 1
    while index < len(text) and text[index] in "rbufRBUF" and index - start < 3:
        index += 1
    if index >= len(text) or text[index] not in "'\"`":
        return None
    formatted = "f" in text[start:index].lower() or text[index] == "`"
    quote = text[index]
    value: list[str] = []
    index += 1
    while index < len(text) and text[index] != quote:
        if text[index] == "\\" and index + 1 < len(text):
            value.append(text[index + 1])
            index += 2
            continue
        value.append(text[index])
        index += 1
    literal = "".join(value)
    if formatted and "{" in literal:  # f"rm -rf {x}", `rm -rf ${x}`: filled in at run time
        literal = FIELD.sub(SUBSTITUTION, literal)
    return literal, index + 1


FIELD = re.compile(r"\$?\{[^{}\n]{0,300}\}")


def string_list(text: str, start: int) -> tuple[list[str], int] | None:
    """`["rm", "-rf", x]` at `start`: its string items (a non-literal item → $SUBSTITUTION)."""
    index = start
    while index < len(text) and text[index] in " \t\n(,":
        index += 1
    if index >= len(text) or text[index] not in "[{":
        return None
    closer = "]" if text[index] == "[" else "}"
    items: list[str] = []
    index += 1
    while index < len(text) and text[index] != closer and len(items) < 256:
        literal = string_literal(text, index)
        if literal is not None and not transformed(text, literal[1]):
            items.append(literal[0])
            index = literal[1]
            continue
        if literal is not None:  # `'r'+'m'`, `'mr'[::-1]`: built at run time
            items.append(SUBSTITUTION)
            index = literal[1]
            while index < len(text) and text[index] not in ",]}":
                index += 1
            continue
        elif text[index] not in " \t\n,":
            items.append(SUBSTITUTION)
            while index < len(text) and text[index] not in ",]}":
                index += 1
            continue
        index += 1
    return items, index + 1


def comma_literals(text: str) -> list[str]:
    """`, "-rf", "/usr"`: the literals of an argument list written without brackets."""
    found: list[str] = []
    index = 0
    while index < len(text) and text[index] == "," and len(found) < 64:
        literal = string_literal(text, index + 1)
        if literal is None:
            found.append(SUBSTITUTION)
            break
        found.append(literal[0])
        index = literal[1]
        while index < len(text) and text[index] in " \t\n":
            index += 1
    return found


def transformed(code: str, end: int) -> bool:
    """A literal that is joined (`+`, `.`, `..`), sliced, indexed or formatted (`%`) before use."""
    after = code[end : end + 8].lstrip(" \t\n")
    if after[:1] in ("+", "[", "%", "*", '"', "'"):  # joined, sliced, formatted, juxtaposed
        return True
    return after[:1] == "." and not after[1:2].isdigit()
