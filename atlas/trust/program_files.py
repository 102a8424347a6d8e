"""Command files a debugger or database shell runs, read and judged as the inline forms are
(issue 33, item 3): `gdb -x FILE`, `gdb --command=FILE`, sqlite3's `.read FILE` and `-init FILE`,
`sqlite3 db < FILE`, `psql -f FILE`, psql's `\\i FILE`, `mysql < FILE`.

A bot may write such a file in one call and run it in the next, so the line alone says nothing:
the file is read (when it lies in the bot's workspace, the one place the gate reads for this;
at most SCRIPT_LIMIT bytes) and each command in it is judged exactly as the same command given
on the line is (parser/escapes.py): gdb's `shell`/`!`/`pipe`/`python`, a database shell's
`.shell`/`.system`/`.output |cmd`/`\\!`/`\\o |cmd`. A file that cannot be read, is too large,
lies outside the workspace, or is written by the same line is not understood: asked.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from atlas.trust.command_words import Context, expand
from atlas.trust.parser.escapes import (
    SQL_PIPES,
    client_commands,
    gdb_escapes,
    option_values,
)
from atlas.trust.parser.normalise import Part
from atlas.trust.scripts import (
    SCRIPT_DEPTH,
    Judges,
    NotAScript,
    ScriptTooLarge,
    judge_code,
    read_script,
    unjudged,
)
from atlas.trust.verdict import Verdict, worst

GDB = {"gdb", "gdb-multiarch", "cgdb"}
# gdb's options that name a command file (run after, or before, the program is loaded).
GDB_FILE_OPTIONS = {"-x", "--x", "-command", "--command", "-ix", "--ix", "-init-command",
                    "--init-command"}  # fmt: skip
SQLITE = {"sqlite3", "duckdb"}
# A database shell's own commands that read another file of commands.
INCLUDES = {
    "sqlite3": (".read ",),
    "duckdb": (".read ",),
    "psql": ("\\i ", "\\ir ", "\\include ", "\\include_relative "),
    "mysql": ("source ", "\\. "),
    "mariadb": ("source ", "\\. "),
}
PSQL_FILE_OPTIONS = {"-f", "--file"}
STDIN_NAMES = {"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"}  # fed on stdin: judged so
MAX_FILES = 16  # files named on one line, and included by them, read through at most
# Lines of a gdb `python` … `end` block: the block is one piece of Python.
GDB_PYTHON_BLOCK = {"python", "py", "python-interactive", "pi"}


def files_run(part: Part) -> list[str]:
    """The command files this part's program reads and runs, as written on the line."""
    head = posixpath.basename(part.head)
    words = part.words
    if head in GDB:
        return [n for n in option_values(words, GDB_FILE_OPTIONS) if n not in STDIN_NAMES][:16]
    if head not in INCLUDES:
        return []
    found = _stdin_file(words)
    if head in SQLITE:
        found += option_values(words, {"-init", "--init"})
    if head == "psql":
        found += option_values(words, PSQL_FILE_OPTIONS)
        found += [w[2:] for w in words[1:] if w.startswith("-f") and len(w) > 2 and w[2] != "="]
    texts = [w for w in words[1:] if not w.startswith("-")] + [part.heredoc or ""]
    found += [name for name, _ in included(head, texts)]
    return [name for name in found if name not in STDIN_NAMES][:MAX_FILES]


def included(head: str, texts: list[str]) -> list[tuple[str, str]]:
    """(file, how) for each include command in a database shell's input (`.read x.sql`)."""
    found = []
    for text in texts:
        for line in text.split("\n")[:256]:
            stripped = line.strip()
            for prefix in INCLUDES.get(head, ()):
                if stripped.startswith(prefix) and (name := stripped[len(prefix) :].strip()):
                    found.append((name.strip("'\""), prefix.strip()))
    return found


def _stdin_file(words: list[str]) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("<", "0<")]


def judge_program_files(
    part: Part, context: Context, depth: int, written: set[str], judges: Judges
) -> Verdict | None:
    """Read each command file the part's program runs and judge what it would run."""
    head = posixpath.basename(part.head)
    names = files_run(part)
    if not names:
        return None
    budget = [MAX_FILES]
    found = [_judge_file(head, n, context, depth, written, judges, budget) for n in names]
    return worst(found)


def _judge_file(
    head: str,
    name: str,
    context: Context,
    depth: int,
    written: set[str],
    judges: Judges,
    budget: list[int],
) -> Verdict | None:
    if head == "sqlite3" and name.startswith(
        "|"
    ):  # `.read |cmd`: sqlite runs cmd, reads its output
        return judges.text(name[1:], context, depth + 1, None)
    budget[0] -= 1
    if depth >= SCRIPT_DEPTH or budget[0] < 0:
        return unjudged("program-file", f"{name} is one command file too many to read through")
    text = _read_in_workspace(name, context, written)
    if isinstance(text, Verdict):
        return text
    found: list[Verdict | None] = []
    if head in GDB:
        for kind, command in gdb_file_commands(text):
            if kind == "source":
                found.append(
                    _judge_file(head, command, context, depth + 1, written, judges, budget)
                )
            elif kind == "opaque":
                found.append(Verdict("ask", "opaque:opaque-code", f"{name}: {command}"))
            elif kind == "python":
                found.append(judge_code("python", command, context, judges.part))
            else:
                found.append(judges.text(command, context, depth + 1, None))
    else:
        for line in client_commands(head, [text]) if head in SQL_PIPES else []:
            found.append(judges.text(line, context, depth + 1, None))
        for inner, _ in included(head, [text]):
            found.append(_judge_file(head, inner, context, depth + 1, written, judges, budget))
    verdict = worst(found)
    if verdict is None or verdict.verdict == "allow":
        return None
    return Verdict(verdict.verdict, verdict.rule, f"{name}: {verdict.reason}")


def gdb_file_commands(text: str) -> list[tuple[str, str]]:
    """What a gdb command file runs outside gdb, as (kind, text): "shell" lines, "python" code
    (a one-line `python CODE` or a `python` … `end` block), "source" files, "opaque" reasons."""
    found: list[tuple[str, str]] = []
    block: list[str] | None = None
    for line in text.split("\n")[:4096]:
        stripped = line.strip()
        if block is not None:
            if stripped == "end":
                found.append(("python", "\n".join(block)))
                block = None
            else:
                block.append(line)
            continue
        if not stripped or stripped.startswith("#"):
            continue
        if stripped in GDB_PYTHON_BLOCK:
            block = []
            continue
        if stripped.startswith("source "):
            found.append(("source", stripped[len("source ") :].strip()))
            continue
        if escape := gdb_escapes(stripped):
            found.append(escape)
    if block is not None:  # gdb runs an unterminated block at the end of the file
        found.append(("python", "\n".join(block)))
    return found


def _read_in_workspace(name: str, context: Context, written: set[str]) -> str | Verdict:
    """The text of a command file in the bot's workspace, or why it is not understood."""
    expanded = expand(name, context)
    if not expanded.startswith("/"):
        return unjudged("program-file", f"{name} names no folder the gate knows")
    if expanded in written:
        return unjudged("script-written", f"{name} is written by this same command line")
    if context.workspace is None:
        return unjudged("program-file", f"{name} is outside a workspace the gate reads")
    real = os.path.realpath(expanded)  # a link in the workspace may point anywhere
    workspace = os.path.realpath(context.workspace)
    if not real.startswith(workspace.rstrip("/") + "/"):
        return unjudged("program-file", f"{name} is outside the workspace, where the gate reads")
    try:
        data = read_script(Path(real))
    except NotAScript as exc:
        return unjudged("program-file", f"{name} is {exc}, not a command file")
    except ScriptTooLarge:
        return unjudged("program-file", f"{name} is too large to read through")
    except OSError as exc:
        return unjudged("program-file", f"{name} could not be read ({exc.strerror})")
    return data.decode("utf-8", errors="replace")
