"""Shell word text as the shell would see it: quoting kept as escapes, braces expanded, globs found.

A word is built in an *escaped* form: every character that brace expansion or globbing would
treat specially is preceded by a backslash when it was quoted (so `'*'` stays a literal star and
`*` stays a glob). `brace_expand` and `has_glob` read that form; `unescape` gives the final text.
Everything here is a single left-to-right pass (or a bounded number of them): linear time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from atlas.trust.parser.shell_grammar import PARSER

if TYPE_CHECKING:
    from tree_sitter import Node

SPECIAL = set("\\{},*?[]")
GLOB = set("*?[")
MAX_BRACE_RESULTS = 64  # a word expands to at most this many words; the rest are dropped
SEQUENCE = re.compile(r"(-?\d{1,6})\.\.(-?\d{1,6})|([A-Za-z])\.\.([A-Za-z])")


def quoted(text: str) -> str:
    """Text from inside quotes: nothing in it is special."""
    return "".join("\\" + c if c in SPECIAL else c for c in text)


def unquoted(text: str) -> str:
    """Text of an unquoted word: a backslash quotes the next character, the rest stays active."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            if following != "\n":  # a backslash-newline joins lines
                out.append("\\" + following if following in SPECIAL else following)
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def double_quoted(text: str) -> str:
    """Literal text inside "…": a backslash only quotes `$`, backtick, `"`, `\\` and newline."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in '$`"\\\n':
            if text[index + 1] != "\n":
                out.append(quoted(text[index + 1]))
            index += 2
            continue
        out.append(quoted(char))
        index += 1
    return "".join(out)


def unescape(word: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(word):
        if word[index] == "\\" and index + 1 < len(word):
            out.append(word[index + 1])
            index += 2
        else:
            out.append(word[index])
            index += 1
    return "".join(out)


def has_glob(word: str) -> bool:
    """True when the escaped word has an unquoted `*`, `?` or `[`."""
    index = 0
    while index < len(word):
        if word[index] == "\\":
            index += 2
            continue
        if word[index] in GLOB:
            return True
        index += 1
    return False


ANSI_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
                "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}  # fmt: skip


def ansi_c(text: str) -> str:
    """The value of `$'…'` (without the `$'` and `'`): `\\x72\\x6d` → `rm`."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\" or index >= len(text):
            out.append(char)
            continue
        code = text[index]
        index += 1
        if code in ANSI_ESCAPES:
            out.append(ANSI_ESCAPES[code])
        elif code in "xuU01234567":
            base, width = {"x": (16, 2), "u": (16, 4), "U": (16, 8)}.get(code, (8, 3))
            start = index if code in "xuU" else index - 1
            digits = ""
            allowed = "0123456789abcdefABCDEF" if base == 16 else "01234567"
            while len(digits) < width and start + len(digits) < len(text):
                if text[start + len(digits)] not in allowed:
                    break
                digits += text[start + len(digits)]
            index = start + len(digits)
            out.append(chr(int(digits, base)) if digits and int(digits, base) < 0x110000 else "")
        else:
            out.append("\\" + code)
    return "".join(out)


def _brace_pairs(word: str) -> tuple[int, int, list[int]] | None:
    """The first `{…}` that brace expansion would expand: (open, close, top-level commas)."""
    stack: list[tuple[int, list[int]]] = []
    index = 0
    while index < len(word):
        char = word[index]
        if char == "\\":
            index += 2
            continue
        if char == "{":
            stack.append((index, []))
        elif char == "," and stack:
            stack[-1][1].append(index)
        elif char == "}" and stack:
            start, commas = stack.pop()
            body = word[start + 1 : index]
            if commas or SEQUENCE.fullmatch(body):
                return start, index, commas  # the first pair to close; outer pairs expand later
        index += 1
    return None


def _alternatives(word: str, start: int, close: int, commas: list[int]) -> list[str]:
    body = word[start + 1 : close]
    if not commas:
        match = SEQUENCE.fullmatch(body)
        assert match is not None
        if match.group(1) is not None:
            first, last = int(match.group(1)), int(match.group(2))
            step = 1 if last >= first else -1
            count = min(abs(last - first) + 1, MAX_BRACE_RESULTS)
            return [str(first + step * n) for n in range(count)]
        first, last = ord(match.group(3)), ord(match.group(4))
        step = 1 if last >= first else -1
        return [chr(first + step * n) for n in range(min(abs(last - first) + 1, 52))]
    bounds = [start, *commas, close]
    return [word[bounds[n] + 1 : bounds[n + 1]] for n in range(len(bounds) - 1)]


def brace_expand(word: str) -> list[str]:
    """`{rm,-rf,~}` → [rm, -rf, ~]… as the shell expands an escaped word, at most 64 results."""
    results: list[str] = []
    pending = [word]
    steps = 0
    while pending and len(results) < MAX_BRACE_RESULTS and steps < 4 * MAX_BRACE_RESULTS:
        steps += 1
        current = pending.pop(0)
        found = _brace_pairs(current)
        if found is None:
            results.append(current)
            continue
        start, close, commas = found
        prefix, suffix = current[:start], current[close + 1 :]
        pending = [
            prefix + alt + suffix for alt in _alternatives(current, start, close, commas)
        ] + (pending)
    results.extend(pending[: MAX_BRACE_RESULTS - len(results)])
    return results


SIMPLE_EXPANSION = re.compile(rb"\$([A-Za-z_][A-Za-z0-9_]*)")


def rejoined(nodes: list[Node]) -> list[Node]:
    """Words tree-sitter split in two (`rm$IFS-rf$IFS/` ends in a lone `$`), parsed again whole:
    two word nodes that touch are one shell word."""
    groups: list[list[Node]] = []
    for node in nodes:
        if groups and groups[-1][-1].end_byte == node.start_byte:
            groups[-1].append(node)
        else:
            groups.append([node])
    result: list[Node] = []
    for group in groups:
        if len(group) == 1:
            result.append(group[0])
            continue
        text = SIMPLE_EXPANSION.sub(rb"${\1}", b"".join(n.text or b"" for n in group))
        command = PARSER.parse(b": " + text).root_node.named_children
        arguments = command[0].children_by_field_name("argument") if command else []
        result.extend(arguments or group)
    return result


def named_binary(word: str) -> bool:
    """`/usr/bin/rm` is `rm`; `./x.sh` stays a path (it is a script to read)."""
    return word.startswith(("/bin/", "/usr/bin/", "/sbin/", "/usr/sbin/", "/usr/local/bin/"))


VALUED = {"-W", "-X", "-r", "--require", "--import", "--loader", "-I", "-o", "-O", "--rcfile",
          "--init-file", "-m", "-f", "-F", "-v"}  # fmt: skip


def operands_of(words: list[str]) -> list[str]:
    """An interpreter's operands (a script, `-` for stdin), redirects left out."""
    operands: list[str] = []
    index = 1
    while index < len(words):
        word = words[index]
        if word in ("<<<", "<", ">", ">>", "2>", "&>", "2>>") or word[:1] in "<>":
            index += 2
            continue
        if word == "-m" or word == "--":
            return ["-m"] if word == "-m" else words[index + 1 : index + 2]
        if word.startswith("-") and word != "-":
            index += 2 if word in VALUED else 1
            continue
        operands.append(word)
        index += 1
    return operands


def is_redirect(word: str) -> bool:
    """`>`, `2>>`, `&>`, `>|`: the next word is a file written to."""
    return re.fullmatch(r"\d*>>?|&>>?|>\|", word) is not None
