"""Scripts a command runs, read and judged by the same rules as the line (rules.py passes its
judges in): a script that cannot be read, is too large, or is written by the same line before it
runs is asked; a venv's own scripts are Python's."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from atlas.trust.command_words import (
    Context,
    build_files,
    expand,
    shebang_language,
)
from atlas.trust.home_paths import code_mentions_home
from atlas.trust.outside import code_sends, metadata_address
from atlas.trust.parser.interpreters import script_argument
from atlas.trust.parser.normalise import (
    MAX_COMMAND_CHARS,
    Analysis,
    Part,
    analyse,
    code_parts,
    interpreter_of,
)
from atlas.trust.parser.parse import Scope, Walker
from atlas.trust.verdict import Verdict, worst

# Bytes of a script read through; a larger script cannot be judged, and is asked.
SCRIPT_LIMIT = 256 * 1024
SCRIPT_DEPTH = 3  # scripts running scripts, followed this deep

JudgePart = Callable[[Part, Context], Verdict | None]


@dataclass(frozen=True)
class Judges:
    """rules.py's judges of a whole text and of one part (scripts recurse through them)."""

    text: Callable[[str, Context, int, Analysis | None], Verdict]
    part: JudgePart


def judge_script(
    part: Part,
    context: Context,
    depth: int,
    written: set[str],
    venvs: set[str],
    judge: Judges,
) -> Verdict | None:
    """Read the script a part runs and judge it by the same rules. A script that cannot be
    read, or that this same line writes before running it, cannot be judged: it is asked."""
    name = script_argument(part)
    if name is None or depth >= SCRIPT_DEPTH:
        return None
    expanded = expand(name, context)
    if not expanded.startswith("/"):
        return None  # relative and no working folder: judged by its command line only
    if any(expanded.startswith(venv + "/bin/") for venv in venvs) and expanded not in written:
        return None  # `python -m venv .venv && . .venv/bin/activate`: written by Python
    if expanded in written:
        return unjudged("script-written", f"{name} is written by this same command line")
    path = Path(expanded)
    try:
        data = read_script(path)
    except NotAScript as exc:
        return unjudged("script-unreadable", f"{name} is {exc}, not a script file")
    except ScriptTooLarge:
        return unjudged("script-too-large", f"{name} is too large to read through")
    except OSError as exc:
        return unjudged("script-unreadable", f"{name} could not be read ({exc.strerror})")
    if b"\0" in data[:4096]:
        return None  # a compiled program: nothing to read through
    text = data.decode("utf-8", errors="replace")
    language = interpreter_of(part.head) or shebang_language(text, path)
    if language in (None, "shell"):
        verdict = judge.text(text, context, depth + 1, analyse_script(text))
    else:
        verdict = judge_code(language, text, context, judge.part)
    if verdict.verdict == "allow":
        return None
    return Verdict(verdict.verdict, verdict.rule, f"{name}: {verdict.reason}")


def written_build_file(part: Part, context: Context, written: set[str]) -> Verdict | None:
    """`printf 'x:\\n\\trm -rf ~' > Makefile && make`: a build file the line writes, then runs."""
    for name in build_files(part) if written else []:
        if expand(name, context) in written:
            return unjudged("script-written", f"{name} is written by this same command line")
    return None


def analyse_script(text: str) -> Analysis:
    """A script file is parsed whole up to SCRIPT_LIMIT (a command line stops at
    MAX_COMMAND_CHARS): the parse is linear, and a long build script is ordinary."""
    if len(text) <= MAX_COMMAND_CHARS:
        return analyse(text)
    result = Analysis()
    try:
        Walker(result, Scope(), 0, [], analyse=analyse).run(text)
    except RecursionError:  # the walk is bounded; as in normalise.analyse
        result.note("too-deep: commands nested too deeply to follow")
    return result


def unjudged(key: str, reason: str) -> Verdict:
    return Verdict("ask", f"opaque:{key}", f"{reason}, so it cannot be judged before it runs")


def judge_code(language: str, text: str, context: Context, judge_part: JudgePart) -> Verdict:
    """A python/node/perl/ruby… script: what its code runs, sends out, or touches in the home."""
    found: list[Verdict | None] = [judge_part(p, context) for p in code_parts(language, text)]
    sends = code_sends(text) or (
        ("metadata", f"reads the cloud metadata address {address}")
        if (address := metadata_address(text))
        else None
    )
    if sends:
        found.append(Verdict("ask", f"outside:{sends[0]}", sends[1]))
    home = code_mentions_home(text, context)
    if home:
        found.append(Verdict("ask", f"home:{home}", "the script names the Atlas home"))
    return worst(found)


class NotAScript(Exception):
    """The path is not a regular file (what it is, in words, is the message)."""


class ScriptTooLarge(Exception):
    pass


def read_script(path: Path) -> bytes:
    """The bytes of a regular file of at most SCRIPT_LIMIT bytes. A device (`/dev/zero` never
    ends) or a FIFO (it blocks until someone writes) would hold a judging thread, so the file is
    opened without blocking and its type checked on the open descriptor before any read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAScript(_file_kind(mode))
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(SCRIPT_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > SCRIPT_LIMIT:
        raise ScriptTooLarge
    return data


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "something other than a file"
