"""Interpreters and the inline code they run: which program is an interpreter, where its inline
code is, and what that code would do, as shell-like Parts (`shutil.rmtree('x')` → `rm -r x`),
and the script file a command runs instead (`bash x.sh`, `python x.py`, `source x`).

Code is read with linear scans: no pattern here back-references or nests quantifiers.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from atlas.trust.parser.code_literals import (
    comma_literals,
    string_list,
    string_literal,
    transformed,
)
from atlas.trust.parser.parse_types import SUBSTITUTION, Part
from atlas.trust.parser.parse_words import is_redirect

SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "ash", "fish", "mksh", "yash", "rbash"}
INTERPRETERS = {
    "python": "python", "pypy": "python", "perl": "perl", "node": "node", "nodejs": "node",
    "ruby": "ruby", "deno": "node", "bun": "node", "php": "php", "lua": "lua", "luajit": "lua",
    "awk": "awk", "gawk": "awk", "mawk": "awk", "nawk": "awk",
    "tclsh": "tcl", "wish": "tcl", "expect": "tcl", "jimsh": "tcl",
}  # fmt: skip
INLINE_FLAGS = {
    "python": {"-c"}, "perl": {"-e", "-E"}, "ruby": {"-e"}, "php": {"-r", "-R", "-B", "-E"},
    "node": {"-e", "--eval", "-p", "--print"}, "lua": {"-e"}, "tcl": {"-c"},
}  # fmt: skip
OPTION_VALUES = {"-X", "-W", "-r", "--require", "-I", "--import", "--loader", "-C"}
SHELL_VALUED = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}
AWK_VALUED = {"-F", "-v", "--field-separator", "--assign", "-i", "--include", "-l", "--load"}
# Interpreter options that take a value (`python -W ignore x.py`, `node -r esm x.js`).
VALUED_INTERPRETER_OPTIONS = {"-W", "-X", "-r", "--require", "--import", "--loader", "-I", "-o",
                              "--rcfile", "--init-file", "-O"}  # fmt: skip
VERSION = re.compile(r"[\d.]+[tmdu]?$")  # only ever run on one word: python3.13t, ksh93


# Programs whose inline code is read, but which are not "interpreters" to the rules: their
# first operand is a subcommand (`bun install`, `deno run`) or a program text (awk), not a script.
CODE_ONLY = {"awk", "gawk", "mawk", "nawk", "deno", "bun"}


def interpreter_of(head: str) -> str | None:
    """`python3.12` → "python", `bash` → "shell"; None for other commands (see `language_of`)."""
    if head in CODE_ONLY:
        return None
    return language_of(head)


def language_of(head: str) -> str | None:
    """Like `interpreter_of`, and also awk, deno and bun, whose inline code is read too."""
    base = VERSION.sub("", head[:64]) if head[:1].isalpha() else head
    if head in SHELLS or base in SHELLS:
        return "shell"
    return INTERPRETERS.get(base)


def inline_code(part: Part, every: bool = False) -> str | None:
    """The code of `python -c CODE`, `bash -e -c CODE`, `perl -ne CODE`…, if the part has one;
    with `every`, also `deno eval CODE`, `bun -e CODE` and awk's program."""
    language = language_of(part.head) if every else interpreter_of(part.head)
    words = part.words
    if language is None:
        return None
    if language == "shell":
        return _shell_code(words)
    if language == "awk":
        return _awk_program(words)
    if part.head == "deno" and len(words) > 1:
        rest = [w for w in words[1:] if not w.startswith("-")]
        return rest[1] if rest[:1] == ["eval"] and len(rest) > 1 else None
    if part.head == "bun" and words[1:2] == ["eval"] and len(words) > 2:
        return words[2]
    flags = INLINE_FLAGS[language]
    skip = 0
    for index, word in enumerate(words[1:], start=1):
        if index + 1 >= len(words):
            break
        if index <= skip:
            continue
        if word in OPTION_VALUES and word not in flags:  # `python -X importtime -c CODE`
            skip = index + 1
            continue
        if word == "--":
            return None
        if word in flags:
            return words[index + 1]
        for flag in flags:
            if flag.startswith("--") and word.startswith(flag + "="):
                return word.split("=", 1)[1]
        # combined short flags: `python -Ic CODE`, `perl -lane CODE`, `ruby -ne CODE`
        if re.fullmatch(r"-[a-zA-Z]{1,8}", word) and "-" + word[-1] in flags:
            return words[index + 1]
        if not word.startswith("-") and language != "perl":
            return None  # a script file: what follows are its arguments
    return None


def _shell_code(words: list[str]) -> str | None:
    """`bash [options] -c CODE`: with `c` in any option cluster, the first operand is the code."""
    has_c = False
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--" or word == "-":
            index += 1
            break
        if word in SHELL_VALUED:
            index += 2
            continue
        if word.startswith("--"):
            index += 1
            continue
        if word[:1] in "-+" and len(word) > 1:
            has_c |= "c" in word[1:]
            index += 1
            continue
        break
    return words[index] if has_c and index < len(words) else None


def _awk_program(words: list[str]) -> str | None:
    index = 1
    while index < len(words):
        word = words[index]
        if word in ("-f", "--file") or word.startswith("-f"):
            return None  # the program is in a file
        if word in ("-e", "--source"):
            return words[index + 1] if index + 1 < len(words) else None
        if word in AWK_VALUED:
            index += 2
            continue
        if word == "--":
            index += 1
            break
        if word.startswith("-") and len(word) > 1:
            index += 1
            continue
        break
    return words[index] if index < len(words) else None


def script_argument(part: Part) -> str | None:
    """The script file a part runs: `bash x.sh`, `./x.sh`, `python x.py`, `source x`."""
    head, words = part.head, part.words
    if head in ("source", "."):
        return words[1] if len(words) > 1 else None
    if "/" in head and head != SUBSTITUTION:
        return head
    language = interpreter_of(head)
    if language is None or inline_code(part) is not None:
        return None
    rest = words[1:]
    reads_stdin = False
    while rest and rest[0].startswith("-"):
        if rest[0] == "--" and len(rest) > 1 and not reads_stdin:
            return rest[1]  # `bash -- x.sh` (but `bash -s -- ARGS` reads its code from stdin)
        reads_stdin |= rest[0] == "-s" or (
            language == "shell" and rest[0][1:2] != "-" and "s" in rest[0]
        )
        if rest[0] in ("-m", "-", "--", "/dev/fd/0", "/proc/self/fd/0"):
            return None  # a module, or code read from stdin
        option = rest.pop(0)
        if option in VALUED_INTERPRETER_OPTIONS and rest:
            rest.pop(0)
    if rest[:1] == ["<"] and len(rest) > 1 and not rest[1].startswith("/dev/"):
        return rest[1]  # `bash -s < x.sh`, `python < x.py`: the file fed on stdin is the script
    if not rest or rest[0].startswith(("<", ">")) or is_redirect(rest[0]):
        return None  # `bash <<< CODE`, `python < x.py`: code from stdin, judged elsewhere
    return rest[0]


Analyse = Callable[[str, int], list[Part]]


def _run_call(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    """A call that runs a command: a list of words, a program and its argument list, or a
    string the shell runs. Anything computed → a $SUBSTITUTION part."""
    listed = string_list(code, start)
    if listed is not None:
        return _words_run(listed[0] or [SUBSTITUTION], analyse, depth)
    literal = string_literal(code, start)
    if literal is None or transformed(code, literal[1]):
        return [Part([SUBSTITUTION])]  # a variable, or a string joined, sliced or formatted
    after = code[literal[1] : literal[1] + 300].lstrip(" \t\n")
    if after[:1] == "," and " " not in literal[0]:  # spawn("rm", ["-rf", "/"]), exec "rm", "-rf"
        closing = after.find(")")
        opening = after.find("[")
        if 0 <= opening < (closing if closing >= 0 else len(after)):
            arguments = string_list(after, opening)
            listed_words = arguments[0] if arguments else [SUBSTITUTION]
        else:
            listed_words = comma_literals(after)
        return _words_run([literal[0], *listed_words], analyse, depth)
    return _no_bare_shell(analyse(literal[0], depth + 1))


def _words_run(words: list[str], analyse: Analyse, depth: int) -> list[Part]:
    """A program and its argument list, read as the shell would run them (so `/bin/rm` is rm and
    `["bash", "-c", CODE]` has its code judged)."""
    return _no_bare_shell(analyse(shlex.join(words), depth + 1))


def _no_bare_shell(parts: list[Part]) -> list[Part]:
    """`popen("sh")`, awk's `print … | "sh"`: a shell or interpreter fed what the code writes
    runs code that cannot be read, like `… | sh`."""
    for part in parts:
        language = language_of(part.head) if part.words else None
        if language and inline_code(part, every=True) is None and script_argument(part) is None:
            return [Part([SUBSTITUTION])]
    return parts or [Part([SUBSTITUTION])]


def _delete_call(recursive: bool) -> Callable[[str, int, Analyse, int], list[Part]]:
    def make(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
        literal = string_literal(code, start)
        target = literal[0] if literal else SUBSTITUTION
        tail = code[start : start + 200]
        forced = recursive or "recursive" in tail and "true" in tail.lower()
        return [Part(["rm", "-r" if forced else "-f", target])]

    return make


def _shell_string(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    """A string the shell runs: a backtick `…` or awk's `| "cmd"` / `"cmd" | getline`."""
    literal = string_literal(code, start)
    return _no_bare_shell(analyse(literal[0], depth + 1)) if literal else [Part([SUBSTITUTION])]


CLOSERS = {"{": "}", "(": ")", "[": "]", "<": ">"}


def _delimited(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    """Perl's `qx{CMD}`, `qx(CMD)`, `qx|CMD|`: the command up to the closing delimiter."""
    opener = code[start : start + 1]
    end = code.find(CLOSERS.get(opener, opener), start + 1, start + 4000)
    if end == -1:
        return [Part([SUBSTITUTION])]
    return _no_bare_shell(analyse(code[start + 1 : end], depth + 1))


def _move_call(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    """`shutil.move('/home', x)`, `os.rename(a, b)`: mv by another name."""
    literal = string_literal(code, start)
    source = literal[0] if literal else SUBSTITUTION
    after = code[literal[1] : literal[1] + 300] if literal else ""
    target = comma_literals(after.lstrip(" \t\n"))[:1] or [SUBSTITUTION]
    return [Part(["mv", source, target[0]])]


def _pipe_open(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    """Ruby's `open("|cmd")`, Perl's `open(F, "cmd|")`, `open(F, "|cmd")` and
    `open(my $f, "-|", "cmd", …)`: opening a pipe runs a shell command."""
    index, found = start, []
    while len(found) < 3 and index < min(len(code), start + 400):
        char = code[index]
        if char in ";\n{":
            break
        literal = string_literal(code, index) if char in "'\"" else None
        if literal is None:
            index += 1
            continue
        found.append(literal[0])
        text = literal[0].strip()
        if text in ("-|", "|-"):  # the list form: the program and its arguments follow
            after = code[literal[1] : literal[1] + 600].lstrip(" \t\n")
            listed = comma_literals(after)
            return _words_run(listed, analyse, depth) if listed else [Part([SUBSTITUTION])]
        if text.startswith("|") or text.endswith("|"):
            return _no_bare_shell(analyse(text.strip("|").strip(), depth + 1))
        index = literal[1]
    return []


def _computed(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    return [Part([SUBSTITUTION])]


def _file_write(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    literal = string_literal(code, start)
    return [Part(["tee", literal[0] if literal else SUBSTITUTION])]


def _tcl_words(code: str, start: int, analyse: Analyse, depth: int) -> list[Part]:
    """Tcl's `exec rm -rf ~` and expect's `spawn …`: the words up to `;`, `]` or a new line."""
    end = start
    while end < len(code) and code[end] not in ";]\n" and end - start < 2000:
        end += 1
    return _no_bare_shell(analyse(code[start:end], depth + 1))


Maker = Callable[[str, int, Analyse, int], list[Part]]
RUN, RM, RMTREE = _run_call, _delete_call(False), _delete_call(True)
NODE_RULES = [
    (r"\b(?:rmSync|rmdirSync|promises\.rm|fs\.rm|fs\.rmdir|Deno\.remove|removeSync)\b", RM),
    (r"\b(?:unlinkSync|fs\.unlink)\b", RM),
    (r"(?<=\))\.(?:rm|rmdir)\b(?=\s*\()", RM),  # require('fs/promises').rm(…)
    (r"\b(?:execSync|exec|spawnSync|execFileSync|execFile|spawn|Bun\.spawn|Bun\.spawnSync)\b", RUN),
    (r"\bDeno\.(?:Command|run)\b", RUN),
]
CODE_RULES: dict[str, list[tuple[str, Callable[[str, int, Analyse, int], list[Part]]]]] = {
    "python": [
        (r"\b(?:shutil\.)?rmtree\b", RMTREE),
        (r"\b(?:shutil\.move|os\.rename|os\.replace|os\.renames)\b", _move_call),
        (r"\bos\.(?:remove|unlink|rmdir|removedirs)\b", RM),
        (r"\bPath(?=\([^)\n]{0,300}\)\.(?:unlink|rmdir)\b)", RM),
        (
            r"\b(?:os\.system|os\.popen|subprocess\.\w+|os\.exec\w*|os\.spawn\w*|pty\.spawn|os\.posix_spawnp?)\b",
            RUN,
        ),
        (r"\b(?:check_output|check_call|Popen|getoutput|getstatusoutput)\b", RUN),
        (r"(?<=\)\.)(?:system|popen)\b", RUN),  # `__import__('os').system(…)`
    ],
    "node": NODE_RULES,
    "perl": [
        (r"\b(?:rmtree|remove_tree)\b", RMTREE),
        (r"\bunlink\b", RM),
        (r"\b(?:system|exec)\b", RUN),
        (r"(?:qx)?(?=`)", _shell_string),
        (r"\bqx\s*(?=[{(\[<|!/])", _delimited),
        (r"\bopen\b", _pipe_open),
    ],
    "ruby": [
        (r"\bFileUtils\.(?:rm_rf|rm_r|remove_dir|remove_entry\w*)", RMTREE),
        (r"\b(?:File\.delete|File\.unlink|FileUtils\.rm|FileUtils\.rm_f)\b", RM),
        (r"\b(?:system|exec|spawn|IO\.popen|Open3\.\w+)\b", RUN),
        (r"(?=`)", _shell_string),
        (r"\b(?:open|IO\.(?:read|readlines|foreach|write|binread))\b", _pipe_open),
    ],
    "php": [
        (r"\b(?:system|exec|shell_exec|passthru|popen|proc_open|pcntl_exec)\b", RUN),
        (r"\b(?:unlink|rmdir)\b", RM),
        (r"(?=`)", _shell_string),
    ],
    "lua": [(r"\b(?:os\.execute|io\.popen)\b", RUN), (r"\bos\.remove\b", RM)],
    "tcl": [(r"\b(?:exec|spawn)\b", _tcl_words), (r"\bfile\s+delete\b", RM)],
    "awk": [
        (r"\bsystem\b", RUN),
        (r"\|&?(?=\s*\")", _shell_string),  # print … | "cmd"
        (r"(?=\"[^\"\n]{0,500}\"\s*\|\s*getline)", _shell_string),  # "cmd" | getline
        (r"[^|]>>?(?=\s*\")", _file_write),  # print > "/path"
        (r"\|&?(?=\s*[A-Za-z_])(?!\s*getline)", _computed),  # print … | cmd (a variable)
        (r"[A-Za-z_]\w*(?=\s*\|&?\s*getline)", _computed),  # cmd | getline
    ],
}
COMPILED = {
    language: [(re.compile(pattern), make) for pattern, make in rules]
    for language, rules in CODE_RULES.items()
}
COMPILED["node"].append((re.compile(r"(?:\bBun\.\$|\$)(?=`)"), _shell_string))  # Bun.$`…`, zx
OPAQUE_MARKERS = {
    "python": re.compile(r"__dict__|__builtins__|\bsys\.modules\b|\b(?:vars|globals|locals)\s*\(|"
                         r"\b(?:exec|eval|compile|b64decode|a85decode|getattr|run_path|"
                         r"run_module|b32decode|fromhex|unhexlify|marshal|pickle|codecs\.decode)"
                         r"\s*\("),
    "node": re.compile(r"\b(?:eval|Function|atob|fromCharCode)\s*\(|['\"]base64['\"]"
                       r"|\brequire\s*\(\s*['\"`][./][^'\"`\n]{0,200}(?<!\.json)['\"`]|\[[^\]\n+]{0,80}\+[^\]\n]{0,80}\]\s*\("),
    "perl": re.compile(r"\b(?:eval|decode_base64|pack)\b|\b(?:do|require)\s+['\"]"
                       r"|['\"]\s*\|\s*\w|['\"]-?\|-?['\"]"),
    "ruby": re.compile(r"\b(?:eval|instance_eval|send|unpack1?|decode64)\b|%x\W"
                       r"|\b(?:load|require)\s*\(?\s*['\"][./]"),
    "php": re.compile(r"\b(?:eval|assert|base64_decode|create_function|call_user_func\w*)\s*\("
                      r"|\$\w+\s*\(|\b(?:include|require)(?:_once)?\b"),
    "lua": re.compile(r"\b(?:load|loadstring|dofile)\s*\(|\b(?:os|io)\s*\["),
}  # fmt: skip


def code_parts(language: str, code: str, analyse: Analyse, depth: int = 0) -> list[Part]:
    """What a piece of python, perl, node, ruby, php, lua or awk code would do, as shell parts."""
    parts: list[Part] = []
    rules = COMPILED.get(language, [])
    if language == "python":
        rules = rules + _python_aliases(code)
    for pattern, make in rules:
        for match in pattern.finditer(code):
            parts.extend(make(code, match.end(), analyse, depth))
            if len(parts) > 256:
                break
    for part in parts:
        part.origin = language if part.origin == "shell" else part.origin
    return parts


PYTHON_ALIAS = re.compile(r"\bimport\s+(?:subprocess|os|shutil|pty)\s+as\s+(\w{1,40})")
PYTHON_FROM = re.compile(r"\bfrom\s+(?:subprocess|os|shutil|pty)\s+import\s+([\w ,]{1,300})")


def _python_aliases(code: str) -> list[tuple[re.Pattern[str], Maker]]:
    """`import subprocess as s; s.run([...])`, `from os import system; system(...)`."""
    names = [m.group(1) + r"\.\w+" for m in PYTHON_ALIAS.finditer(code[:100_000])][:16]
    original: dict[str, str] = {}
    for found in list(PYTHON_FROM.finditer(code[:100_000]))[:16]:
        for item in found.group(1).split(",")[:32]:
            imported, _, alias = item.strip().partition(" as ")  # `system as s`: s is system
            name = alias.strip() or imported.strip()
            if name.isidentifier():
                names.append(name)
                original[name] = imported.strip()
    rules: list[tuple[re.Pattern[str], Maker]] = []
    for name in names:
        real = original.get(name, name)
        make = (
            RMTREE
            if real == "rmtree"
            else RM
            if real in ("remove", "unlink")
            else _move_call
            if real in ("move", "rename", "replace", "renames")
            else RUN
        )
        rules.append((re.compile(r"(?<![\w.])" + name + r"\b(?=\s*\()"), make))
    return rules


def opaque_reason(language: str, code: str) -> str | None:
    """Why code in this language cannot be read before it runs (it builds and runs code)."""
    marker = OPAQUE_MARKERS.get(language)
    if marker is not None:
        found = marker.search(code)
        if found:
            return f"opaque-code: {language} code runs code it builds ({found.group(0).strip()}…)"
    return None
