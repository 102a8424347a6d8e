"""Shell commands taken apart into the simple commands they run, with their disguises removed.

A command is judged by its parts: `a; b && c | d`, function and alias bodies, every `$(…)`,
backtick and `<(…)`, here-docs and strings fed to a shell, the string of a `bash -c`, and what an
interpreter's inline code would do. Wrappers (`sudo`, `env`, `timeout 5`, `xargs`, `find -exec`…)
are seen through to the command they run. The line is parsed with tree-sitter-bash (see parse.py);
what cannot be resolved before it runs is listed in `Analysis.unresolved`.

The parser's modules, from the top: this one, parse.py (the walk), parse_commands.py (one simple
command), then what they use: interpreters.py, parse_extras.py, wrappers.py, parse_words.py,
shell_grammar.py, parse_types.py. None imports a module above it: `analyse` is handed to the
Walker, which calls it for shell code found inside other code (`python -c 'os.system(…)'`).
"""

from __future__ import annotations

import re

from atlas.trust.parser import interpreters
from atlas.trust.parser.interpreters import (
    INLINE_FLAGS,
    INTERPRETERS,
    SHELLS,
    inline_code,
    interpreter_of,
)
from atlas.trust.parser.parse import MAX_DEPTH, Scope, Walker
from atlas.trust.parser.parse_types import SUBSTITUTION, Analysis, Part, Word
from atlas.trust.parser.wrappers import WRAPPERS

MAX_COMMAND_CHARS = 10_000  # longer lines are not parsed: they are asked

__all__ = [
    "INLINE_FLAGS", "INTERPRETERS", "MAX_COMMAND_CHARS", "MAX_DEPTH", "SHELLS", "SUBSTITUTION",
    "WRAPPERS", "Analysis", "Part", "Word", "analyse", "code_parts", "inline_code",
    "interpreter_of", "normalise",
]  # fmt: skip


def normalise(command: str) -> list[str]:
    """The parts of a shell command to judge, each as one space-joined string."""
    return [part.text for part in analyse(command).parts if part.words]


def analyse(command: str, depth: int = 0) -> Analysis:
    """Take a command apart into Parts (see the module docstring)."""
    result = Analysis()
    if len(command) > MAX_COMMAND_CHARS:
        result.note(f"too-long: {len(command)} characters is too long to judge")
        return result
    if depth > MAX_DEPTH:
        result.parts.append(Part([SUBSTITUTION]))
        result.note("too-deep: commands nested too deeply to follow")
        return result
    try:
        Walker(result, Scope(), depth, [], analyse=analyse).run(_unfolded(command))
    except RecursionError:  # the walk is bounded; this is the last line of defence
        result.note("too-deep: commands nested too deeply to follow")
    return result


def code_parts(language: str, code: str, depth: int = 0) -> list[Part]:
    """What a piece of shell, python, perl, node, ruby, php, lua or awk code would do."""
    if language == "shell":
        return analyse(code, depth + 1).parts

    def shell(text: str, inner_depth: int) -> list[Part]:
        return analyse(text, inner_depth).parts

    return interpreters.code_parts(language, code, shell, depth)


# `time { …; }`, `coproc NAME { …; }`: keywords tree-sitter reads as a command named `time`; the
# group they prefix is what runs. Matched only at a command's start, in one linear pass.
GROUP_PREFIX = re.compile(
    r"(^|[;&|(\n]\s{0,16})(?:time(?:\s+-p)?|coproc(?:\s+\w{1,64})?)\s+(?=[{(])"
)


def _unfolded(command: str) -> str:
    """The line as bash reads it: backslash-newline continuations joined (`r\\⏎m` is `rm`)."""
    if "\\\n" in command:
        command = command.replace("\\\n", "")
    return (
        GROUP_PREFIX.sub(r"\1", command) if ("time" in command or "coproc" in command) else command
    )
