"""Wrappers read by their own rules: xargs (`-a FILE`, `-I{}`), tmux (the shell command it
starts) and bwrap (options with one or two values)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from atlas.trust.parser.parse_types import Word

if TYPE_CHECKING:
    from atlas.trust.parser.wrappers import Unwrapped

XARGS_PLACEHOLDER = ("-I", "-i", "--replace", "-J")


def xargs(words: list[Word], result: Unwrapped) -> None:
    """`xargs -a FILE` reads FILE; with `-I{}`, a word holding `{}` is only known at run time
    (`xargs -I{} {} -rf ~`, `xargs -I{} sh -c {}`)."""
    texts = [w.text for w in words]
    marker = None
    for index, text in enumerate(texts[: len(texts) - len(result.words)]):
        option, equals, value = text.partition("=")
        following = texts[index + 1] if index + 1 < len(texts) else ""
        if option in ("-a", "--arg-file"):
            result.reads.append(Word(value if equals else following))
        elif option in XARGS_PLACEHOLDER:
            marker = value if equals else (following if option in ("-I", "-J") else "{}")
        elif text.startswith("-I") and len(text) > 2:
            marker = text[2:]
    if marker:
        result.words = [
            Word(w.text, w.glob, w.taint | {"computed"}) if marker in w.text else w
            for w in result.words
        ]


TMUX_RUNS = {"new", "new-session", "new-window", "neww", "split-window", "splitw", "run-shell",
             "run", "respawn-pane", "respawnp", "respawn-window", "respawnw", "display-popup",
             "popup"}  # fmt: skip
TMUX_VALUED = {"-c", "-e", "-F", "-n", "-s", "-t", "-x", "-y", "-l", "-p", "-b", "-L", "-S", "-f",
               "-d", "-T", "-w", "-h"}  # fmt: skip


def tmux(words: list[Word], result: Unwrapped) -> Unwrapped:
    """`tmux new -d 'CMD'`, `tmux -c CMD`, `tmux run-shell CMD`: the shell command it starts."""
    result.wrappers.append("tmux")
    result.words = []
    texts = [w.text for w in words]
    if "-c" in texts[1:2]:
        result.code.append(texts[2] if len(texts) > 2 else "")
        return result
    start = next((i for i, t in enumerate(texts) if t in TMUX_RUNS), None)
    if start is None:
        return result
    index = start + 1
    while index < len(texts) and texts[index].startswith("-"):
        flags = texts[index]
        index += 2 if flags in TMUX_VALUED and flags not in ("-d", "-b", "-h") else 1
    if index < len(texts):
        result.code.append(" ".join(texts[index:]))
    return result


BWRAP_TWO = {"--bind", "--bind-try", "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try",
             "--symlink", "--setenv", "--bind-data", "--ro-bind-data", "--file", "--chmod"}  # fmt: skip


def bwrap(words: list[Word], one: frozenset[str]) -> list[Word]:
    """`bwrap --bind / / --dev /dev CMD…`: options take none, one or two values."""
    index = 0
    while index < len(words) and words[index].text.startswith("--"):
        text = words[index].text
        if text == "--":
            return words[index + 1 :]
        index += 3 if text in BWRAP_TWO else 2 if text in one else 1
    return words[index:]


def attached_code(text: str, code: frozenset[str]) -> str | None:
    """In a short-option cluster, a code flag takes the rest of the word as its value."""
    for position, letter in enumerate(text[1:], start=1):
        if "-" + letter in code:
            rest = text[position + 1 :]
            return rest or None
    return None
