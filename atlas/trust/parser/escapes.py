"""Shell escapes of programs that read commands of their own (issue 33, principle 3): ed's
`!cmd`, database shells' output pipes (sqlite's `.output |cmd`, psql's `\\o |cmd` and `COPY …
PROGRAM`), and `git config` in all its spellings (`git config set`, `-f .git/config`).

Each function answers the shell lines the program would run.
"""

from __future__ import annotations

import re

ED = {"ed", "red"}
# ed commands that run the rest of the line: `!cmd`, `r !cmd`, `w !cmd`, `e !cmd`, `,w !cmd`.
ED_ESCAPE = re.compile(r"[0-9,.$;+\-' a-z]{0,24}?!(.*)")
SQL_PIPES = {
    "sqlite3": (".output |", ".output|", ".once |", ".once|", ".shell ", ".system "),
    "psql": ("\\o |", "\\o|", "\\g |", "\\g|", "\\gexec", "\\!", "\\w |"),
    "duckdb": (".output |", ".once |", ".shell ", ".system "),
    "mysql": ("system ", "\\!", "pager ", "\\P "),
    "mariadb": ("system ", "\\!", "pager ", "\\P "),
}
COPY_PROGRAM = re.compile(r"\bPROGRAM\s+'([^'\n]{1,2000})'", re.I)
MAX_LINES = 256


def _lines(text: str) -> list[str]:
    """Lines as the program reads them; printf's `\\n` written on the line counts as one."""
    return text.replace("\\n", "\n").split("\n")[:MAX_LINES]


def ed_commands(script: str) -> list[str]:
    """The shell lines an ed script runs."""
    found = []
    for line in _lines(script):
        match = ED_ESCAPE.match(line.strip())
        if match and match.group(1).strip():
            found.append(match.group(1))
    return found


def client_commands(head: str, texts: list[str]) -> list[str]:
    """The shell lines a database shell runs from its arguments or input (`.output |cmd`)."""
    prefixes = SQL_PIPES.get(head)
    if not prefixes:
        return []
    found: list[str] = []
    for text in texts:
        for line in _lines(text):
            stripped = line.strip()
            for prefix in prefixes:
                if stripped.startswith(prefix) and prefix != "\\gexec":
                    found.append(stripped[len(prefix) :])
            if head == "psql":
                found += COPY_PROGRAM.findall(line)
    return found[:32]


# `git config` options that take a value, and its subcommands (git 2.46+).
GIT_CONFIG_VALUED = {"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"}
GIT_CONFIG_VERBS = {"set", "get", "unset", "list", "rename-section", "remove-section", "edit"}


def git_config_setting(words: list[str]) -> tuple[str, str] | None:
    """`git config [set] [-f FILE|--global|…] KEY VALUE` → (KEY, VALUE)."""
    if "config" not in words:
        return None
    rest = words[words.index("config") + 1 :]
    operands: list[str] = []
    index = 0
    while index < len(rest):
        word = rest[index]
        if word in GIT_CONFIG_VALUED:
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        operands.append(word)
        index += 1
    if operands[:1] and operands[0] in GIT_CONFIG_VERBS:
        if operands[0] != "set":
            return None
        operands = operands[1:]
    return (operands[0], operands[1]) if len(operands) >= 2 else None


GDB_COMMAND_OPTIONS = {"-ex", "--ex", "-eval-command", "--eval-command", "-iex", "--iex",
                       "-init-eval-command", "--init-eval-command"}  # fmt: skip
GDB_PYTHON = re.compile(r"(?:python|python-interactive|pi|py)\s+(.+)", re.S)
GDB_FOREIGN = re.compile(r"(?:guile|gu|guile-repl|gr)\b")
GDB_INFERIOR_CALL = re.compile(r"(?:call|print|p|output)\s.{0,200}\b(?:system|exec\w*|popen)\s*\(")


def option_values(words: list[str], names: set[str]) -> list[str]:
    """The values of the given options (`-e CMD`, `--rsh=CMD`)."""
    found: list[str] = []
    for index, word in enumerate(words[1:], start=1):
        option, equals, value = word.partition("=")
        if option in names:
            if equals:
                found.append(value)
            elif index + 1 < len(words):
                found.append(words[index + 1])
    return found


def gdb_commands(words: list[str]) -> list[str]:
    """The commands given to gdb on its line (`-ex CMD`, `--eval-command=CMD`)."""
    return option_values(words, GDB_COMMAND_OPTIONS)[:64]


def gdb_escapes(command: str) -> tuple[str, str] | None:
    """What one gdb command runs outside gdb: ("shell", line), ("python", code), or
    ("opaque", why) for code not read here; None for a gdb command that stays inside gdb."""
    text = command.strip()
    for prefix in ("shell ", "!"):
        if text.startswith(prefix):
            return "shell", text[len(prefix) :]
    if text.startswith(("pipe ", "|")):  # `pipe CMD | SHELL`, `| CMD | SHELL`
        rest = text[5:] if text.startswith("pipe ") else text[1:]
        _, bar, shell = rest.partition("|")
        return ("shell", shell) if bar else None
    found = GDB_PYTHON.fullmatch(text)
    if found:
        return "python", found.group(1)
    if GDB_FOREIGN.match(text):
        return "opaque", "gdb runs Guile code, which is not read here"
    if GDB_INFERIOR_CALL.match(text):
        return "opaque", "gdb calls system() or exec in the program it debugs"
    return None
