"""Shell commands taken apart into the simple commands they run, with their disguises removed.

A command is judged by its parts: `a; b && c | d`, every `$(…)`, backtick and `<(…)`, the
string of a `bash -c`, and what an interpreter's inline code would do. Wrappers (`sudo`, `env`,
`timeout 5`, `xargs`…) are seen through to the command they run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

SUBSTITUTION = "$SUBSTITUTION"  # stands for a value only known when the command runs
MAX_DEPTH = 6  # nested `bash -c` / `$(…)` levels followed; deeper is judged as opaque

SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "ash", "fish"}
INTERPRETERS = {
    "python": "python",
    "perl": "perl",
    "node": "node",
    "nodejs": "node",
    "ruby": "ruby",
}
INLINE_FLAGS = {"python": {"-c"}, "perl": {"-e", "-E"}, "node": {"-e", "--eval", "-p", "--print"}}
INLINE_FLAGS["ruby"] = {"-e"}

# Wrapper → its options that take a value (so the value is not mistaken for the command).
WRAPPERS: dict[str, set[str]] = {
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-U", "-r", "-t", "-D", "-R", "-T"},
    "doas": {"-u", "-C"},
    "env": {"-u", "-C", "-S", "--unset", "--chdir"},
    "nohup": set(),
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "xargs": {"-I", "-i", "-n", "-P", "-d", "-L", "-l", "-s", "-E", "-e", "-a", "--arg-file"},
    "exec": {"-a"},
    "nice": {"-n", "--adjustment"},
    "command": set(),
    "time": {"-f", "-o"},
    "stdbuf": {"-i", "-o", "-e"},
    "ionice": {"-c", "-n", "-p"},
    "builtin": set(),
}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


@dataclass
class Part:
    """One simple command: its words, the wrappers it was found inside, and what fed it."""

    words: list[str]
    wrappers: list[str] = field(default_factory=list)
    piped_from: str | None = None  # head of the previous stage when this part reads a pipe
    heredoc: str | None = None  # the body fed to this part's stdin by `<<EOF`
    origin: str = "shell"  # "shell", or the interpreter whose code this part was derived from

    @property
    def head(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Analysis:
    parts: list[Part] = field(default_factory=list)
    process_substitution: bool = False


def normalise(command: str) -> list[str]:
    """The parts of a shell command to judge, each as one space-joined string."""
    return [part.text for part in analyse(command).parts if part.words]


def analyse(command: str, depth: int = 0) -> Analysis:
    """Take a command apart into Parts (see the module docstring)."""
    result = Analysis()
    if depth > MAX_DEPTH:
        result.parts.append(Part([SUBSTITUTION]))
        return result
    command = re.sub(r"\$\{IFS\}|\$IFS\b", " ", command)
    command, heredocs = _cut_heredocs(command)
    command = _extract_substitutions(command, result, depth)
    previous_head: str | None = None
    for segment, piped in _split_segments(command):
        body = None
        marker = re.search(r"<<HEREDOC(\d+)", segment)
        if marker:  # with several heredocs on one command, the first feeds stdin
            body = heredocs[int(marker.group(1))]
            segment = re.sub(r"<<HEREDOC\d+", "", segment)
        words = _words(segment)
        if not words:
            previous_head = None
            continue
        part = _unwrap(words)
        part.piped_from = previous_head if piped else None
        if body is None and "<<<" in part.words[:-1]:  # a here-string: `bash <<< "rm -rf /"`
            body = part.words[part.words.index("<<<") + 1]
        part.heredoc = body
        result.parts.append(part)
        previous_head = part.head
        _expand_inline(part, result, depth)
    return result


def _cut_heredocs(command: str) -> tuple[str, list[str]]:
    """Replace each `<<EOF … EOF` by a marker; the bodies are returned in order."""
    bodies: list[str] = []
    lines = command.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        pending = [(m.group(3), m.group(1) == "-") for m in HEREDOC.finditer(line)]
        pieces = HEREDOC.split(line)  # text, then 3 groups per heredoc, then text…
        marked = pieces[0]
        for number, start in enumerate(range(1, len(pieces), 4)):
            marked += f"<<HEREDOC{len(bodies) + number}" + pieces[start + 3]
        out.append(marked)
        for delimiter, strip_tabs in pending:
            body: list[str] = []
            while index < len(lines):
                candidate = lines[index]
                index += 1
                if (candidate.lstrip("\t") if strip_tabs else candidate) == delimiter:
                    break
                body.append(candidate)
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


def _extract_substitutions(command: str, result: Analysis, depth: int) -> str:
    """Judge each `$(…)`, backtick and `<(…)`/`>(…)` as its own command; leave a placeholder."""
    out: list[str] = []
    index = 0
    quote: str | None = None
    while index < len(command):
        char = command[index]
        if quote == "'":
            if char == "'":
                quote = None
            out.append(char)
            index += 1
            continue
        if char == "\\" and index + 1 < len(command):
            out.append(command[index : index + 2])
            index += 2
            continue
        if char in "'\"" and (quote is None or quote == char):
            quote = None if quote else char
            out.append(char)
            index += 1
            continue
        opener = command[index : index + 2]
        if opener in ("$(", "<(", ">(") and not command.startswith("$((", index):
            end = _matching_paren(command, index + 2)
            inner = command[index + 2 : end]
            if opener != "$(" and quote is None:
                result.process_substitution = True
            _merge(result, analyse(inner, depth + 1))
            out.append(SUBSTITUTION)
            index = end + 1
            continue
        if char == "`":
            end = command.find("`", index + 1)
            end = len(command) if end == -1 else end
            _merge(result, analyse(command[index + 1 : end], depth + 1))
            out.append(SUBSTITUTION)
            index = end + 1
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _matching_paren(text: str, start: int) -> int:
    level = 1
    for index in range(start, len(text)):
        if text[index] == "(":
            level += 1
        elif text[index] == ")":
            level -= 1
            if level == 0:
                return index
    return len(text)


def _merge(into: Analysis, other: Analysis) -> None:
    into.parts.extend(other.parts)
    into.process_substitution |= other.process_substitution


def _split_segments(command: str) -> list[tuple[str, bool]]:
    """Split on `;`, `&&`, `||`, `|`, `&` and newlines outside quotes; True if piped into."""
    segments: list[tuple[str, bool]] = []
    current: list[str] = []
    piped = False
    quote: str | None = None
    index = 0
    while index < len(command):
        char = command[index]
        if quote:
            if char == "\\" and quote == '"' and index + 1 < len(command):
                current.append(command[index : index + 2])
                index += 2
                continue
            if char == quote:
                quote = None
            current.append(char)
            index += 1
            continue
        if char == "\\" and index + 1 < len(command):
            if command[index + 1] != "\n":  # a backslash-newline continues the line
                current.append(command[index : index + 2])
            index += 2
            continue
        if char in "'\"":
            quote = char
        elif char in ";\n" or (char in "&|" and not _is_redirect(command, index)):
            two = command[index : index + 2]
            segments.append(("".join(current), piped))
            current = []
            piped = char == "|" and two != "||"
            index += 2 if two in ("&&", "||", "|&", ";;") else 1
            continue
        current.append(char)
        index += 1
    segments.append(("".join(current), piped))
    return segments


def _is_redirect(command: str, index: int) -> bool:
    """`2>&1`, `&>file` and `>|` use & and | without separating commands."""
    before = command[index - 1] if index else ""
    after = command[index + 1] if index + 1 < len(command) else ""
    return before in "<>" or (command[index] == "&" and after == ">")


def _words(segment: str) -> list[str]:
    """Words with quotes and backslashes removed; unbalanced quotes are dropped, not trusted."""
    try:
        words = shlex.split(segment, comments=True)
    except ValueError:
        words = segment.replace("\\", "").replace('"', "").replace("'", "").split()
    # Grouping like `(…)` and `{ …; }` is not a command; `{}` is find's placeholder, kept.
    words = [w for w in words if w == "{}" or not re.fullmatch(r"[(){}]+", w)]
    if words and words[0].startswith("("):
        words[0] = words[0].lstrip("(")
    if words and words[-1].endswith(")") and words[-1].count("(") < words[-1].count(")"):
        words[-1] = words[-1][:-1]
    # Separate redirections glued to their target (`>/dev/sda`, `2>>log`) so targets are words.
    separated: list[str] = []
    for word in words:
        match = re.fullmatch(r"(\d*|&)(>>?|<)(?![(<>])(\S+)", word)
        if match and not match.group(3).startswith("&"):
            separated.extend([match.group(1) + match.group(2), match.group(3)])
        else:
            separated.append(word)
    while separated and separated[0] in ("!", "then", "do", "else", "{", "(", "time"):
        separated.pop(0)  # keywords and grouping before a command
    return separated


def _unwrap(words: list[str]) -> Part:
    """See through leading assignments and wrappers to the command that actually runs."""
    wrappers: list[str] = []
    while words:
        while words and ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words:
            break
        name = words[0].rsplit("/", 1)[-1]
        if name not in WRAPPERS or (name == "command" and words[1:2] in (["-v"], ["-V"])):
            break
        wrappers.append(name)
        rest = words[1:]
        takes_value = WRAPPERS[name]
        while rest and rest[0].startswith("-") and rest[0] != "-":
            option = rest.pop(0)
            if option == "--":
                break
            if option in takes_value and rest:
                rest.pop(0)
        if name == "timeout" and rest:
            rest = rest[1:]  # the duration
        words = rest
    if words:
        words = [
            words[0].rsplit("/", 1)[-1] if _is_named_binary(words[0]) else words[0],
            *words[1:],
        ]
    return Part(words, wrappers)


def _is_named_binary(word: str) -> bool:
    """`/usr/bin/rm` is `rm`; `./x.sh` stays a path (it is a script to read)."""
    return word.startswith(("/bin/", "/usr/bin/", "/sbin/", "/usr/sbin/", "/usr/local/bin/"))


def interpreter_of(head: str) -> str | None:
    """`python3.11` → "python", `bash` → "shell"; None for other commands."""
    if head in SHELLS:
        return "shell"
    base = re.sub(r"[\d.]+$", "", head)
    return INTERPRETERS.get(base)


def inline_code(part: Part) -> str | None:
    """The code of `python -c CODE`, `bash -c CODE`, `perl -e CODE`…, if the part has one."""
    language = interpreter_of(part.head)
    if language is None:
        return None
    flags = {"-c"} if language == "shell" else INLINE_FLAGS[language]
    for index, word in enumerate(part.words[1:], start=1):
        if word in flags and index + 1 < len(part.words):
            return part.words[index + 1]
        # combined short flags: `bash -xc CODE`, `perl -ne CODE`
        combined = language in ("shell", "perl") and re.fullmatch(r"-[a-zA-Z]*[ce]", word)
        if combined and index + 1 < len(part.words):
            return part.words[index + 1]
    return None


def _expand_inline(part: Part, result: Analysis, depth: int) -> None:
    """Add the parts that inline code (or a heredoc fed to an interpreter) would run."""
    language = interpreter_of(part.head)
    if language is None:
        return
    for code in (inline_code(part), part.heredoc):
        if code is None:
            continue
        for derived in code_parts(language, code, depth):
            result.parts.append(derived)


def code_parts(language: str, code: str, depth: int = 0) -> list[Part]:
    """What a piece of shell, python, perl, node or ruby code would do, as shell parts."""
    if language == "shell":
        return analyse(code, depth + 1).parts
    parts: list[Part] = []
    for pattern, make in _CODE_RULES.get(language, []):
        for match in pattern.finditer(code):
            parts.extend(make(match, depth))
    for part in parts:
        part.origin = language
    return parts


def _literal(argument: str) -> str:
    """The string literal an argument starts with, or the placeholder for a computed value."""
    match = re.match(r"\s*[rbuf]*(['\"`])(.*?)\1", argument, re.DOTALL)
    return match.group(2) if match else SUBSTITUTION


def _remove(recursive: bool):  # type: ignore[no-untyped-def]
    def make(match: re.Match[str], depth: int) -> list[Part]:
        target = _literal(match.group("arg"))
        forced = recursive or bool(re.search(r"recursive\s*:\s*true", match.group(0)))
        return [Part(["rm", "-r" if forced else "-f", target])]

    return make


def _run_string(match: re.Match[str], depth: int) -> list[Part]:
    argument = match.group("arg")
    words = re.match(r"\s*\[(.*?)\]", argument, re.DOTALL)
    if words:  # subprocess.run(["rm", "-rf", "/"])
        items = [m.group(2) for m in re.finditer(r"(['\"])(.*?)\1", words.group(1))]
        return [Part(items)] if items else [Part([SUBSTITUTION])]
    literal = _literal(argument)
    return analyse(literal, depth + 1).parts if literal != SUBSTITUTION else [Part([SUBSTITUTION])]


def _backticks(match: re.Match[str], depth: int) -> list[Part]:
    return analyse(match.group(1), depth + 1).parts


def _rule(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern + r"\s*\(?(?P<arg>[^;\n]*)", re.DOTALL)


_CODE_RULES = {
    "python": [
        (_rule(r"\b(?:shutil\.)?rmtree"), _remove(True)),
        (_rule(r"\bos\.(?:remove|unlink|rmdir|removedirs)"), _remove(False)),
        (re.compile(r"Path\((?P<arg>[^)]*)\)\.(?:unlink|rmdir)"), _remove(False)),
        (
            _rule(r"\b(?:os\.system|os\.popen|subprocess\.\w+|os\.exec\w*|check_output|Popen)"),
            _run_string,
        ),
    ],
    "node": [
        (_rule(r"\b(?:fs\.)?(?:rmSync|rmdirSync|rm|rmdir|promises\.rm)"), _remove(False)),
        (_rule(r"\b(?:fs\.)?(?:unlinkSync|unlink)"), _remove(False)),
        (_rule(r"\b(?:execSync|exec|spawnSync|execFileSync|spawn)"), _run_string),
    ],
    "perl": [
        (_rule(r"\b(?:rmtree|remove_tree)"), _remove(True)),
        (_rule(r"\bunlink"), _remove(False)),
        (_rule(r"\b(?:system|exec)"), _run_string),
        (re.compile(r"(?:qx)?`([^`]*)`"), _backticks),
    ],
    "ruby": [
        (_rule(r"\bFileUtils\.(?:rm_rf|rm_r|remove_dir|remove_entry\w*)"), _remove(True)),
        (_rule(r"\b(?:File\.delete|File\.unlink|FileUtils\.rm|FileUtils\.rm_f)\b"), _remove(False)),
        (_rule(r"\b(?:system|exec|spawn)"), _run_string),
        (re.compile(r"`([^`]*)`"), _backticks),
    ],
}
