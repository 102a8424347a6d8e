"""Commands hidden in another program's options: `find -exec`, `git -c core.pager=…`, a git alias
`!…`, tar's `--checkpoint-action=exec=…`/`--to-command`, vim's `-c ':!…'`, `rsync -e`."""

from __future__ import annotations

import re

from atlas.trust.parse_types import Word
from atlas.trust.wrappers import name_of

FETCHERS = {"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request", "GET",
            "nc", "ncat", "netcat", "socat", "ftp", "tftp"}  # fmt: skip
DECOMPRESSORS = {"uudecode", "gunzip", "zcat", "bunzip2", "bzcat", "xzcat", "unxz", "zstdcat",
                 "unzstd", "rev", "tr", "lzcat"}  # fmt: skip
# Variables whose value a program runs as a command (`GIT_SSH_COMMAND="rm -rf ~" git fetch`).
CODE_VARIABLES = {"GIT_SSH_COMMAND", "GIT_SSH", "GIT_PAGER", "PAGER", "GIT_EDITOR", "EDITOR",
                  "VISUAL", "GIT_ASKPASS", "SSH_ASKPASS", "PROMPT_COMMAND",
                  "GIT_EXTERNAL_DIFF", "LESSOPEN", "MANPAGER"}  # fmt: skip
SOURCED_VARIABLES = {"BASH_ENV", "ENV", "PYTHONSTARTUP"}
LOADED_VARIABLES = {"LD_PRELOAD", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PERL5OPT", "NODE_OPTIONS",
                    "RUBYOPT", "PYTHONINSPECT"}  # fmt: skip
LOADER = re.compile(r"(?:^|\s)(?:-r|--require|--import|--loader|--experimental-loader)\b")
FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
# git settings whose value git runs as a shell command.
GIT_CODE_KEYS = {"core.pager", "core.sshcommand", "core.fsmonitor", "core.editor",
                 "sequence.editor", "core.askpass", "diff.external", "gpg.program",
                 "credential.helper", "core.hookspath", "interactive.difffilter",
                 "merge.tool", "diff.tool"}  # fmt: skip
GIT_CODE_PREFIXES = ("alias.", "pager.", "filter.", "diff.", "merge.", "difftool.", "mergetool.")
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
        return _valued(words, {"-e", "--rsh"})
    if head == "zip":
        return _valued(words, {"-TT", "--unzip-command"})
    if head == "man":
        return _valued(words, {"-P", "--pager", "-H", "--html"})
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
        return _valued(words, {"-a", "--args"})
    if head in ("emacs", "emacsclient") and any(w.startswith(("--eval", "-eval")) for w in words):
        return ["$SUBSTITUTION"]
    for word in words[1:] if head in ESCAPES else []:
        for line in word.split("\n")[:64]:
            text = line.strip()
            for prefix in ESCAPES[head]:
                if text.startswith(prefix):
                    found.append(text[len(prefix) :])
    return found


def _valued(words: list[str], names: set[str]) -> list[str]:
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


def _git_value(key: str, value: str) -> str | None:
    key = key.lower()
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


def _git(words: list[str]) -> list[str]:
    """`git -c core.pager='rm -rf ~' log` and `git config alias.x '!rm -rf ~'`."""
    found: list[str] = []
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
    if "config" in words:
        rest = [w for w in words[words.index("config") + 1 :] if not w.startswith("-")]
        if len(rest) >= 2:
            code = _git_value(rest[0], rest[1])
            if code:
                found.append(code)
    return found


def _tar(words: list[str]) -> list[str]:
    found = _valued(words, TAR_CODE)
    for word in words[1:]:
        if word.startswith("--checkpoint-action="):
            action = word.split("=", 1)[1]
            if action.startswith("exec="):
                found.append(action[5:])
    return found


def _vim(words: list[str]) -> list[str]:
    """`vim -c ':!rm -rf ~'`, `vim +'!cmd'`, `--cmd`: what follows a `!` is a shell command."""
    commands = _valued(words, {"-c", "--cmd"})
    commands += [w[1:] for w in words[1:] if w.startswith("+")]
    return [c.split("!", 1)[1] for c in commands if "!" in c]


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
