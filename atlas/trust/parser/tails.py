"""A command inside a command is judged as a command (issue 33, principle 3).

A wrapper the table in wrappers.py does not know (`poetry run`, `bundle exec`, `eatmydata`,
`faketime`, `valgrind`, `direnv exec .`…) still hides nothing: for a program not known to
leave its arguments alone, every argument tail that starts with a program the rules read is
judged as a command line of its own, and every argument that reads as a shell line starting
with one (`nix-shell --run 'rm -rf ~'`) is judged as shell code.
"""

from __future__ import annotations

import re

from atlas.trust.parser.interpreters import INTERPRETERS, SHELLS, language_of
from atlas.trust.parser.wrappers import WRAPPERS, name_of

MAX_TAILS = 4  # tails judged per command (each is a command of its own)
MAX_SCANNED = 64  # words looked at for a tail's start

# Programs the rules read (their own rules apply): a tail starting with one is judged.
RULED = {
    "rm", "rmdir", "unlink", "shred", "dd", "mv", "cp", "rsync", "find", "kill", "pkill",
    "killall", "killall5", "chmod", "chown", "chgrp", "tee", "truncate", "ln", "install",
    "sponge", "tar", "unzip", "crontab", "systemctl", "service", "shutdown", "reboot", "halt",
    "poweroff", "init", "telinit", "loginctl", "kexec", "busctl", "dbus-send", "gdbus", "zfs",
    "zpool", "lvremove", "vgremove", "pvremove", "curl", "wget", "nc", "ncat", "netcat", "socat",
    "telnet", "ssh", "scp", "sftp", "ftp", "openssl", "mail", "sendmail", "mutt", "git", "gh",
    "docker", "podman", "kubectl", "helm", "terraform", "aws", "gsutil", "gcloud", "rclone",
    "az", "psql", "mysql", "sqlite3", "redis-cli", "dropdb", "eval", "source", "exec", "sed",
    "perl", "sudoedit", "ed", "gdb", "vim", "vi", "nvim", "emacs", "make", "atlas", "mkswap",
    "wipefs", "parted", "sgdisk", "blkdiscard", "cryptsetup", "xargs", "npx", "uvx", "sudo",
}  # fmt: skip
FORMATTER_NAME = re.compile(r"mkfs(?:\.\w{1,16})?|mk\w{1,12}fs|newfs\w{0,16}")
# Programs known to leave their arguments alone (they print, search, build or install by
# name): their arguments are data, not a command line (`echo rm -rf ~`, `man rm`).
LEAVES_ARGUMENTS = {
    "echo", "printf", "grep", "egrep", "fgrep", "rg", "ag", "ack", "ls", "cat", "head", "tail",
    "less", "more", "wc", "sort", "uniq", "cut", "tr", "diff", "cmp", "comm", "man", "info",
    "which", "whereis", "type", "whatis", "apropos", "file", "stat", "du", "df", "touch",
    "mkdir", "basename", "dirname", "realpath", "readlink", "test", "[", "[[", "true", "false",
    "jq", "yq", "column", "nl", "tac", "rev", "fold", "fmt", "paste", "join", "od", "xxd",
    "hexdump", "strings", "md5sum", "sha1sum", "sha256sum", "base64", "date", "sleep", "pwd",
    "id", "whoami", "hostname", "uname", "export", "alias", "unalias", "set", "unset",
    "declare", "local", "readonly", "history", "hash", "help", "pip", "pip3", "uv", "npm",
    "pnpm", "yarn", "apt", "apt-get", "apt-cache", "dpkg", "brew", "dnf", "yum", "pacman",
    "apk", "snap", "go", "cargo", "rustc", "rustup", "gcc", "g++", "cc", "clang", "cmake",
    "ninja", "meson", "pytest", "tox", "nox", "mypy", "ruff", "black", "flake8", "pylint",
    "isort", "tsc", "jest", "mocha", "eslint", "prettier", "vitest", "java", "javac", "mvn",
    "gradle", "dotnet", "swift", "kotlinc", "zip", "gzip", "gunzip", "xz", "zstd", "bzip2",
    "htop", "top", "ps", "pgrep", "pidof", "lsof", "free", "uptime", "printenv",
    "tree", "bat", "fd", "fzf", "delta", "code", "nano", "wget2", "sha512sum",
    "xdg-open", "open", "notify-send", "logger", "yes", "seq", "expr", "bc", "let", "read",
    "wait", "jobs", "fg", "bg", "disown", "cd", "pushd", "popd", "dirs", "ulimit", "umask",
    "getent", "groups", "last", "w", "who", "locale", "tput", "clear", "reset", "stty",
    "journalctl", "dmesg", "systemd-analyze", "lsblk", "blkid", "ip", "ss", "netstat", "ping",
    "dig", "host", "nslookup", "traceroute", "whois", "nproc", "lscpu", "vmstat", "iostat",
    "watchman", "ctags", "shellcheck", "hadolint", "terraform-docs", "tokei", "cloc",
}  # fmt: skip


def is_ruled(word: str) -> bool:
    """A program the rules read: a tail starting with it is a command line worth judging."""
    name = name_of(word)
    if not name or len(name) > 64:
        return False
    return (
        name in RULED
        or name in WRAPPERS
        or name in SHELLS
        or name in INTERPRETERS
        or language_of(name) is not None
        or FORMATTER_NAME.fullmatch(name) is not None
    )


def scans_tails(head: str) -> bool:
    """Whether a program's arguments may be a command it runs: any program not known to leave
    them alone, and not itself read by the rules (whose own rules say what it runs)."""
    name = name_of(head)
    return bool(name) and name not in LEAVES_ARGUMENTS and not is_ruled(name)


def tail_starts(texts: list[str]) -> list[int]:
    """Where the argument tails that start with a ruled program begin (at most MAX_TAILS)."""
    found = []
    for index, text in enumerate(texts[1:MAX_SCANNED], start=1):
        if not text.startswith("-") and is_ruled(text):
            found.append(index)
            if len(found) >= MAX_TAILS:
                break
    return found


def shell_strings(texts: list[str]) -> list[str]:
    """Arguments (or `--opt=` values) that read as a shell line starting with a ruled program:
    `nix-shell --run 'rm -rf ~'`, `foo --cmd="curl -d @x host"`."""
    found = []
    for text in texts[1:MAX_SCANNED]:
        value = text.split("=", 1)[1] if text.startswith("-") and "=" in text else text
        first = value.strip().split(maxsplit=1)
        if len(first) == 2 and is_ruled(first[0]):
            found.append(value)
            if len(found) >= MAX_TAILS:
                break
    return found
