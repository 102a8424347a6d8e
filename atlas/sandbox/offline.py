"""Whether a command could use the network at all: if not, its sandbox starts without the proxy
bridge (issue 32, item 3: socat's start is 4-6 ms of every command's).

Only a command made wholly of programs that neither reach the network nor start another program
is judged offline (`ls`, `cat`, `grep`, `wc`, `mkdir`...), with no substitution, no process
substitution and no `/dev/tcp` redirection; anything else, including whatever this module does
not understand, keeps the bridge. Containment does not depend on this judgment: a sandbox has
no network but through the proxy either way, so a wrong "offline" costs the command its proxy,
never the person a leak.
"""

from __future__ import annotations

import re
import shlex

# Programs with no network client and no option that runs another program. Not here on
# purpose: sort (--compress-program), rg (--pre), sed (its `e` command), awk (system), find
# (-exec), xargs, env, less/more (`!`), tar (--use-compress-program), git (hooks, transports).
OFFLINE_PROGRAMS = frozenset(
    {
        "basename", "cat", "chmod", "cmp", "comm", "cp", "cut", "date", "df", "diff",
        "dirname", "du", "echo", "egrep", "false", "fgrep", "file", "fold", "grep", "head",
        "id", "ln", "ls", "md5sum", "mkdir", "mv", "nl", "paste", "printf", "pwd", "readlink",
        "realpath", "rev", "rm", "rmdir", "seq", "sha1sum", "sha256sum", "sleep", "stat",
        "tac", "tail", "tee", "test", "touch", "tr", "tree", "true", "uname", "uniq", "wc",
        "whoami", "[",
    }
)  # fmt: skip
# Anything that can hide a command inside a word, or open a socket by redirection.
OPAQUE = re.compile(r"\$\(|`|<\(|>\(|/dev/(tcp|udp)/|\\\n")
SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", ";;", "\n"})
REDIRECTIONS = frozenset({"<", ">", ">>", "<<", "<<<", ">&", "<&", ">|", "&>", "&>>", "<>"})


def could_use_network(command: str) -> bool:
    """False only when every simple command of `command` runs a program of OFFLINE_PROGRAMS."""
    if OPAQUE.search(command) or "<<" in command:  # a here-document's lines are not commands
        return True
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: not understood
        return True
    at_start, after_redirection = True, False
    for token in tokens:
        if token in SEPARATORS:
            at_start, after_redirection = True, False
        elif after_redirection:
            after_redirection = False  # the file a redirection names
        elif token in REDIRECTIONS or token.rstrip("<>&|").isdigit() and token[-1] in "<>":
            after_redirection = True
        elif set(token) <= set("<>&|()"):
            return True  # a subshell, a group or an operator this module does not know
        elif at_start:
            if token not in OFFLINE_PROGRAMS:
                return True
            at_start = False
    return False


__all__ = ["OFFLINE_PROGRAMS", "could_use_network"]
