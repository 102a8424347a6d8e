"""Commands hidden in another program's options: `find -exec`, `git -c core.pager=…`, a git alias
`!…`, tar's `--checkpoint-action=exec=…`/`--to-command`, vim's `-c ':!…'`, `rsync -e`."""

from __future__ import annotations

import re
import shlex

from atlas.trust.parser.escapes import client_commands, git_config_setting, option_values
from atlas.trust.parser.parse_types import Word
from atlas.trust.parser.wrappers import name_of

FETCHERS = {"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request", "GET",
            "nc", "ncat", "netcat", "socat", "ftp", "tftp"}  # fmt: skip
DECOMPRESSORS = {"uudecode", "gunzip", "zcat", "bunzip2", "bzcat", "xzcat", "unxz", "zstdcat",
                 "unzstd", "rev", "tr", "lzcat"}  # fmt: skip
# Variables whose value a program runs as a command (`GIT_SSH_COMMAND="rm -rf ~" git fetch`).
CODE_VARIABLES = {"GIT_SSH_COMMAND", "GIT_SSH", "GIT_PAGER", "PAGER", "GIT_EDITOR", "EDITOR",
                  "VISUAL", "GIT_ASKPASS", "SSH_ASKPASS", "PROMPT_COMMAND",
                  "GIT_EXTERNAL_DIFF", "LESSOPEN", "MANPAGER"}  # fmt: skip
SOURCED_VARIABLES = {"BASH_ENV", "ENV", "PYTHONSTARTUP"}
# Variables that set git options or npm's script shell (`GIT_CONFIG_VALUE_0='rm -rf ~'`).
CONFIG_VARIABLES = ("GIT_CONFIG_VALUE_", "GIT_CONFIG_PARAMETERS", "npm_config_script_shell",
                    "NPM_CONFIG_SCRIPT_SHELL")  # fmt: skip
LOADED_VARIABLES = {"LD_PRELOAD", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PERL5OPT", "NODE_OPTIONS",
                    "RUBYOPT", "PYTHONINSPECT"}  # fmt: skip
LOADER = re.compile(r"(?:^|\s)(?:-r|--require|--import|--loader|--experimental-loader)\b")
FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
# git settings whose value git runs as a shell command.
GIT_CODE_KEYS = {"core.pager", "core.sshcommand", "core.fsmonitor", "core.editor",
                 "uploadpack.packobjectshook", "core.gitproxy", "core.alternaterefscommand",
                 "sequence.editor", "core.askpass", "diff.external", "gpg.program",
                 "credential.helper", "core.hookspath", "interactive.difffilter",
                 "merge.tool", "diff.tool"}  # fmt: skip
GIT_CODE_PREFIXES = ("alias.", "pager.", "filter.", "diff.", "merge.", "difftool.", "mergetool.",
                     "trailer.")  # fmt: skip
TAR_CODE = {"--to-command", "--use-compress-program", "-I", "--info-script", "-F",
            "--new-volume-script", "--rsh-command"}  # fmt: skip
VIM = {"vim", "vi", "nvim", "ex", "view", "gvim", "rvim", "vimdiff", "evim"}


def exec_commands(words: list[Word]) -> list[list[Word]]:
    """`find … -exec rm -rf {} ;` → [[rm, -rf, {}]]: the commands find runs."""
    if not words or name_of(words[0].text) != "find":
        return []
    commands: list[list[Word]] = []
    index = 1
    while index < len(words):
        if words[index].text in FIND_EXEC:
            end = index + 1
            while end < len(words) and words[end].text not in (";", "+"):
                end += 1
            if end > index + 1:
                commands.append(words[index + 1 : end])
            index = end
        index += 1
    return commands[:16]


def code_strings(words: list[str]) -> list[str]:
    """Shell strings a program runs because its options say so."""
    if not words:
        return []
    head = name_of(words[0])
    if head == "git":
        return _git(words)
    if head in ("tar", "gtar", "bsdtar"):
        return _tar(words)
    if head in VIM:
        return _vim(words)
    if head == "rsync":
        return option_values(words, {"-e", "--rsh"})
    if head in ("sed", "gsed"):
        return _sed(words)
    if head == "zip":
        return option_values(words, {"-TT", "--unzip-command"})
    if head.startswith(("python", "pypy")) and _runs_code_module(words):
        return ["$SUBSTITUTION"]  # `python -m timeit 'os.system(…)'`, `python -m pdb -c CMD`
    if head in ("less", "more", "most"):
        return [w[2:] for w in words[1:] if w.startswith("+!")]  # `less '+!CMD'`
    if head in ("make", "gmake"):  # `make SHELL=CMD`: every recipe runs through CMD
        return [w.split("=", 1)[1] for w in words[1:] if w.startswith(("SHELL=", ".SHELLFLAGS="))]
    if head in ("npm", "pnpm", "yarn"):
        return option_values(words, {"--script-shell", "--shell"})
    if head in ("bash", "sh", "zsh", "ksh", "dash"):  # `bash --rcfile FILE` sources FILE
        return [f". {f}" for f in option_values(words, {"--rcfile", "--init-file"})]
    if head == "man":
        return option_values(words, {"-P", "--pager", "-H", "--html"})
    return _client_escapes(head, words)


# Programs whose commands or arguments have a shell escape: the prefix and what follows it.
ESCAPES = {
    "gdb": ("!", "shell ", "pipe "), "sqlite3": (".shell ", ".system "), "psql": ("\\!",),
    "mysql": ("system ", "\\!"), "mariadb": ("system ", "\\!"), "ftp": ("!",),
}  # fmt: skip


def _client_escapes(head: str, words: list[str]) -> list[str]:
    """`gdb -ex '!CMD'`, `sqlite3 db '.shell CMD'`, `psql -c '\\! CMD'`, `ansible -m shell -a CMD`,
    `emacs --eval '(shell-command …)'` (Lisp: not read, so a computed command)."""
    found: list[str] = []
    if head == "ansible" and set(words) & {"shell", "command", "raw", "ansible.builtin.shell"}:
        return option_values(words, {"-a", "--args"})
    if head in ("emacs", "emacsclient") and any(w.startswith(("--eval", "-eval")) for w in words):
        return ["$SUBSTITUTION"]
    found += client_commands(head, words[1:])  # `.output |cmd`, `\\o |cmd`, COPY … PROGRAM
    for word in words[1:] if head in ESCAPES else []:
        for line in word.split("\n")[:64]:
            text = line.strip()
            for prefix in ESCAPES[head]:
                if text.startswith(prefix):
                    found.append(text[len(prefix) :])
    return found


def _git_value(key: str, value: str) -> str | None:
    key = key.lower()
    if key == "core.hookspath" or key == "include.path" or key.startswith("includeif."):
        return "$SUBSTITUTION"  # git will run whatever hooks that folder holds: not read here
    if key.startswith("alias."):
        return value[1:] if value.startswith("!") else None
    if key == "credential.helper" or key.startswith(GIT_CODE_PREFIXES):
        if key in GIT_CODE_KEYS or key.endswith(
            (
                ".cmd",
                ".command",
                ".clean",
                ".smudge",
                ".process",
                ".textconv",
                ".driver",
                ".program",
            )
        ):
            return value[1:] if value.startswith("!") else value
        return value if key.startswith("pager.") else None
    return value if key in GIT_CODE_KEYS else None


# git options and subcommands whose value or words git runs as a shell command.
GIT_CODE_OPTIONS = {"--upload-pack", "--receive-pack", "--exec", "-x", "--extcmd",
                    "--tree-filter", "--index-filter", "--msg-filter", "--env-filter",
                    "--commit-filter", "--parent-filter", "--tag-name-filter", "--setup"}  # fmt: skip
GIT_RUNS_REST = {("bisect", "run"), ("submodule", "foreach")}


def _git_runs(words: list[str]) -> list[str]:
    """`git rebase --exec CMD`, `git clone --upload-pack=CMD`, `git bisect run CMD…`,
    `git submodule foreach CMD`, `ext::CMD` remotes (`% ` is a space there)."""
    found = option_values(words, GIT_CODE_OPTIONS)
    if "clone" in words or "fetch" in words or "pull" in words:
        found += option_values(words, {"-u"})
    for index in range(1, len(words) - 1):
        if (words[index], words[index + 1]) in GIT_RUNS_REST:
            found.append(" ".join(w for w in words[index + 2 :] if w != "--recursive"))
    for word in [w for w in words if w.startswith("ext::")][:4]:  # `ext::sh -c rm% -rf% ~`
        pieces = re.split(r"(?<!%) ", word[5:])
        found.append(shlex.join(p.replace("% ", " ").replace("%%", "%") for p in pieces))
    return found


def _sed(words: list[str]) -> list[str]:
    """GNU sed's `e CMD` runs CMD, `s/…/…/e` runs the pattern space (unknown), and `w FILE` writes
    FILE: returned as shell strings (the write as `: > FILE`) so the rules judge them."""
    scripts = option_values(words, {"-e", "--expression"})
    operands = [w for w in words[1:] if not w.startswith("-")]
    if not scripts and operands:
        scripts = operands[:1]
    found: list[str] = []
    for script in scripts[:16]:
        for command in SED_COMMANDS.finditer(script[:10_000]):
            verb, rest = command.group(1), (command.group(2) or "").strip()
            if verb == "e":
                found.append(rest or "$SUBSTITUTION")
            elif verb in "wW" and rest:
                found.append(f": > {rest}")
        for flags in SED_SUBSTITUTE_FLAGS.finditer(script[:10_000]):
            if "e" in flags.group(2).split("w", 1)[0]:
                found.append("$SUBSTITUTION")
            if "w" in flags.group(2):
                found.append(f": > {flags.group(2).split('w', 1)[1].strip()}")
    return found


# A sed command after an optional address: `e cmd`, `1e cmd`, `$w file`, `/x/w file`. Linear:
# blanks never include a newline (a newline starts the next command, so each run of blanks is
# read once), and the blanks after the address belong to the address (two `\s*` side by side
# were quadratic on `;` and 10,000 spaces).
SED_COMMANDS = re.compile(
    r"(?:^|[;\n{}])[^\S\n]*(?:(?:\d{1,9}|\$|/[^/\n]{0,200}/)[^\S\n]*)?([ewW])(?:\s+([^;\n}]*)|$)"
)
# `s/a/b/FLAGS` with `/` or `|` or `#` as the delimiter: the flags after the third one.
SED_SUBSTITUTE_FLAGS = re.compile(
    r"s([/|#:,])(?:[^\\/|#:,\n]|\\.){0,200}\1(?:[^\\/|#:,\n]|\\.){0,200}\1([gpiImMe0-9]{0,12}w?[^;\n]{0,300})"
)


def _git(words: list[str]) -> list[str]:
    """`git -c core.pager='rm -rf ~' log` and `git config alias.x '!rm -rf ~'`."""
    found: list[str] = _git_runs(words)
    for index, word in enumerate(words[1:], start=1):
        if word == "-c" and index + 1 < len(words):
            key, _, value = words[index + 1].partition("=")
            code = _git_value(key, value)
            if code:
                found.append(code)
        elif word.startswith("--config-env=") or word.startswith("-c") and "=" in word[2:]:
            key, _, value = (
                word.split("=", 1)[-1].partition("=")
                if word.startswith("--")
                else word[2:].partition("=")
            )
            code = _git_value(key, value)
            if code:
                found.append(code)
    setting = git_config_setting(words)  # `git config [set] [-f FILE] KEY VALUE`
    if setting:
        code = _git_value(*setting)
        if code:
            found.append(code)
    return found


def _tar(words: list[str]) -> list[str]:
    found = option_values(words, TAR_CODE)
    for word in words[1:]:
        if word.startswith("--checkpoint-action="):
            action = word.split("=", 1)[1]
            if action.startswith("exec="):
                found.append(action[5:])
    return found


def _vim(words: list[str]) -> list[str]:
    """`vim -c ':!rm -rf ~'`, `vim +'!cmd'`, `--cmd`: what follows a `!` is a shell command."""
    commands = option_values(words, {"-c", "--cmd"})
    commands += [  # `ex -sc CMD`: a cluster ending in c takes the next word
        words[i + 1]
        for i, w in enumerate(words[:-1])
        if i and re.fullmatch(r"-[A-Za-z]{1,6}c", w) and w != "-c"
    ]
    commands += [w[1:] for w in words[1:] if w.startswith("+")]
    found = [c.split("!", 1)[1] for c in commands if "!" in c]
    if any(VIM_CODE.search(c) for c in commands):  # `call system(…)`, `:py3 …`, `:lua …`
        found.append("$SUBSTITUTION")
    for command in commands[:32]:  # `-c 'wq! ../bot.toml'`: a write to that file
        for piece in command.split("|")[:16]:
            written = VIM_WRITE.match(piece)
            if written:
                found.append(f": > {written.group(1)}")
    return found


VIM_WRITE = re.compile(r"\W{0,8}(?:w|wq|write|x|xit|sav|saveas|up|update|wa)!?\s+([^\s|]{1,4096})")


VIM_CODE = re.compile(
    r"\b(?:system|systemlist|job_start|jobstart|term_start|termopen|libcall)\s*\("
    r"|^\W*(?:py\w*|lua\w*|perl\w*|rub\w*|mz\w*|tcl\w*|so\w*|exe\w*)\b"
)


def is_decoder(words: list[str]) -> bool:
    """base64 -d, xxd -r, openssl … -d, printf '\\x..', echo -e '\\x..', gunzip, rev, tr…"""
    head = name_of(words[0]) if words else ""
    rest = words[1:]
    flags = "".join(w[1:] for w in rest if w.startswith("-") and not w.startswith("--"))
    if head in ("base64", "base32", "basenc", "b64"):
        return "d" in flags or "D" in flags or "--decode" in rest
    if head == "xxd":
        return "r" in flags or "--revert" in rest
    if head == "openssl":
        return "d" in flags or "-base64" in rest or "base64" in rest
    if head in ("gzip", "bzip2", "xz", "zstd", "lz4"):
        return "d" in flags or "--decompress" in rest
    if head in ("printf", "echo"):
        escaped = any("\\x" in w or "\\0" in w or "\\u" in w for w in rest)
        return escaped and (head == "printf" or "e" in flags)
    return head in DECOMPRESSORS


# Interpreters whose code Atlas does not read: their inline code is asked when it may run
# commands, touch files or reach the network.
FOREIGN_INLINE = {
    "Rscript": {"-e"}, "R": {"-e"}, "julia": {"-e", "-E", "--eval", "--print"},
    "octave": {"--eval"}, "elixir": {"-e", "--eval"}, "iex": {"-e"}, "groovy": {"-e"},
    "osascript": {"-e"}, "pwsh": {"-c", "-command", "-encodedcommand", "-e", "-ec", "-enc"},
    "powershell": {"-c", "-command", "-encodedcommand", "-e", "-ec", "-enc"}, "guile": {"-c"},
    "racket": {"-e"}, "sbcl": {"--eval"}, "clisp": {"-x"}, "erl": {"-eval"}, "scala": {"-e"},
    "ghc": {"-e"}, "swift": {"-e"}, "raku": {"-e"}, "perl6": {"-e"}, "qjs": {"-e"},
    "rhino": {"-e"}, "gforth": {"-e"}, "crystal": {"eval"}, "kotlin": {"-e"}, "jrunscript": {"-e"},
}  # fmt: skip
FOREIGN_ACTS = re.compile(
    r"(?i)\b(?:system\w*|shell\w*|exec\w*|run\w*|spawn\w*|popen|cmd|command|process\w*|"
    r"remove-item|rm|rm_rf|rmdir|unlink\w*|delete\w*|socket\w*|https?|curl|wget|invoke-\w+|"
    r"iex|start-process|eval\w*|download\w*|write\w*|open\w*|file\w*|getenv|env)\b"
)


def foreign_code(words: list[str]) -> tuple[str, str] | None:
    """(interpreter, code) for inline code in a language the rules cannot read, when it may act."""
    head = name_of(words[0]) if words else ""
    flags = FOREIGN_INLINE.get(head) or FOREIGN_INLINE.get(head.rstrip("0123456789.-"))
    if not flags:
        return None
    for index, word in enumerate(words[1:-1], start=1):
        if word.lower() in flags or word.lower().split("=", 1)[0] in flags:
            code = word.split("=", 1)[1] if "=" in word else words[index + 1]
            encoded = "enc" in word.lower()
            return (head, code) if encoded or FOREIGN_ACTS.search(code[:100_000]) else None
    return None


def _runs_code_module(words: list[str]) -> bool:
    """A module that runs code given on the line: timeit's statements, pdb's -c commands."""
    if "-m" not in words[:4]:
        return False
    module = words[words.index("-m") + 1] if words.index("-m") + 1 < len(words) else ""
    rest = words[words.index("-m") + 2 :]
    code = [w for w in rest if not w.startswith("-")]
    return (module == "timeit" and any(CODE_WORDS.search(w) for w in code)) or (
        module == "pdb" and "-c" in rest
    )


CODE_WORDS = re.compile(r"\b(?:os|subprocess|shutil|system|exec|eval|open|socket|__import__)\b")
